"""GMAH on the split two-agent four rooms: both agents start in the north-west room and the team
is rewarded only once they stand in two different rooms of the goal set (south-west, south-east).

Xu et al., arXiv:2408.11416, on `hrljax.envs.two_agent_rooms` with `task="split"`: each agent
starts in a random cell of the north-west room; the episode terminates with a team reward of 1
when one agent stands in the south-west room and the other in the south-east one (either way
round; both in one goal room earns nothing), and is truncated after 100 steps. Both agents
observe the goal set (a two-hot), not a room of their own: who goes where is for them to agree
on, through the observed positions, the coordination a mixer over the agents' values can help
with. The agent is that of `gmah_two_agent_rooms` (QMIX mixer; `--config.mixer=none` is the
independent-learners ablation).

  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_split.py \\
      --workdir=runs/gmah_split/gmah_qmix --config.seeds=0,1,2
  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_split.py \\
      --workdir=runs/gmah_split/gmah_none --config.seeds=0,1,2 --config.mixer=none
"""

import ml_collections

from experiments.configs import gmah_two_agent_rooms


def get_config():
  config = gmah_two_agent_rooms.get_config()
  config.env_kwargs = ml_collections.ConfigDict(
    {
      "task": "split",  # the agents must take two different rooms of the goal set
      "start_rooms": (0, 0),  # both start in the north-west room
      "target_rooms": (2, 3),  # the goal set: south-west and south-east
      "max_steps_in_episode": 100,  # time limit
    }
  )
  config.total_timesteps = 800_000  # team environment steps: 50,000 Learner steps of 16
  return config
