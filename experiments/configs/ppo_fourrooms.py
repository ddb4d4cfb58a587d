"""PPO on the option-critic four-rooms task: the flat baseline for option_critic_fourrooms.py.

Same environment, observation, number of environments, budget and transfer flag
(`--config.transfer_after=<environment steps>`, summed over environments; 0: the goal never
moves). The learning rate is not annealed, so that PPO can still adapt after the goal moves.

`--config=experiments/configs/ppo_fourrooms.py:TEACHER.npz` adds Snapshot RL's resets (Zhao et
al., arXiv:2403.00673; `docs/environments.md`): after an auto-reset an episode starts from one of
the teacher states in TEACHER.npz (`python -m experiments.snapshot_states`) with probability
`env_kwargs.snapshot_reset.start_probability`, annealed linearly to 0 over `snapshot_anneal`
environment steps (summed over the environments).
"""

from hrljax.agents import ppo
from hrljax.envs import four_rooms, snapshot_reset


def get_config(teacher_states=None):
  config = ppo.get_config()
  config.env_name = four_rooms.ENV_NAME
  config.env_kwargs.observation = "one_hot"
  config.num_envs = 16
  config.total_timesteps = 2_000_000
  config.anneal_lr = False
  config.transfer_after = 0
  config.env_kwargs.transfer_after_steps = config.get_ref("transfer_after") // config.get_ref(
    "num_envs"
  )
  config.env_kwargs.transfer_seed = 0  # seed of the moved goal's draw (part of the task)
  if teacher_states:
    snapshot_reset.configure(config, teacher_states, anneal_env_steps=100_000)
  return config
