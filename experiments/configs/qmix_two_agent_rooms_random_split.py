"""Flat QMIX on the random split two-agent four rooms: the flat multi-agent value learner on the
task of `gmah_two_agent_rooms_random_split`, at its budget.

`qmix_simple_spread`'s settings with the environment of the GMAH preset (both agents start in one
room drawn per episode, the team is rewarded once they stand in two different rooms of a goal set
drawn per episode) and γ 0.99 for its 100-step episodes. The options of the GMAH preset apply:
`--config.env_kwargs.observe_others=False` hides the other agent's position,
`--config.env_kwargs.shared_room_ends=True` ends an episode, unrewarded, once both agents stand
in one goal room.

  python -m experiments.train --config=experiments/configs/qmix_two_agent_rooms_random_split.py \\
      --workdir=runs/qmix_rsplit --config.seeds=0,1,2
"""

import ml_collections

from experiments.configs import qmix_simple_spread


def get_config():
  config = qmix_simple_spread.get_config()
  config.env_name = "TwoAgentFourRooms-v0"  # hrljax.envs.two_agent_rooms
  config.env_kwargs = ml_collections.ConfigDict(
    {
      "task": "random_split",  # start room and goal set drawn per episode
      "observe_others": True,  # False: each agent sees only its own position and the goal set
      "shared_room_ends": False,  # True: both agents in one goal room end the episode unrewarded
      "max_steps_in_episode": 100,  # time limit
    }
  )
  config.gamma = 0.99  # 100-step episodes with one sparse team reward
  return config
