"""GMAH on the random split two-agent four rooms: both agents start in one room drawn per episode
and the team is rewarded only once they stand in two different rooms of a goal set drawn per
episode (two of the other three rooms).

Xu et al., arXiv:2408.11416, on `hrljax.envs.two_agent_rooms` with `task="random_split"`: the
split task of `gmah_two_agent_rooms_split` with its rooms drawn at every reset (12 equally likely
pairs of start room and goal set), so the room each agent should take changes from episode to
episode and a division of labour has to read the goal set and the start room. The episode
terminates with a team reward of 1 once the agents stand in the two goal rooms, one each, and is
truncated after 100 steps. `--config.env_kwargs.observe_others=False` hides the other agent's
position from each agent (the mixer still reads both);
`--config.env_kwargs.shared_room_ends=True` ends an episode, unrewarded, as soon as both agents
stand in one goal room (a failed division of labour is final). The agent is that of
`gmah_two_agent_rooms` (QMIX mixer; `--config.mixer=none` is the independent-learners ablation).

  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_random_split.py \\
      --workdir=runs/gmah_rsplit/gmah_qmix --config.seeds=0,1,2
  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_random_split.py \\
      --workdir=runs/gmah_rsplit/gmah_none --config.seeds=0,1,2 --config.mixer=none
"""

import ml_collections

from experiments.configs import gmah_two_agent_rooms


def get_config():
  config = gmah_two_agent_rooms.get_config()
  config.env_kwargs = ml_collections.ConfigDict(
    {
      "task": "random_split",  # start room and goal set drawn per episode
      "observe_others": True,  # False: each agent sees only its own position and the goal set
      "shared_room_ends": False,  # True: both agents in one goal room end the episode unrewarded
      "max_steps_in_episode": 100,  # time limit
    }
  )
  config.total_timesteps = 400_000  # team environment steps: 25,000 Learner steps of 16
  return config
