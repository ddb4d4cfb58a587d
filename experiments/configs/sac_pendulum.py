"""SAC on gymnax Pendulum-v1 with the paper's hyperparameters (arXiv:1812.05905, Appendix D).

Pendulum-v1 never terminates; every episode is truncated after 200 steps and bootstraps from its
final observation. 20k environment steps (100 episodes) are plenty: SAC usually gets close to the
best returns (about -150) within 10k.

`--config=experiments/configs/sac_pendulum.py:TEACHER.npz` adds Snapshot RL's resets (Zhao et al.,
arXiv:2403.00673; `docs/environments.md`): after an episode ends the next one starts from one of
the teacher states in TEACHER.npz (`python -m experiments.snapshot_states`) with probability
`env_kwargs.snapshot_reset.start_probability`, annealed linearly to 0 over `snapshot_anneal`
environment steps.
"""

from hrljax.agents import sac
from hrljax.envs import snapshot_reset


def get_config(teacher_states=None):
  config = sac.get_config()
  config.env_name = "Pendulum-v1"
  config.total_timesteps = 20_000  # 100 episodes
  config.buffer_size = 20_000  # the whole run fits
  config.log_every = 1000  # Learner steps (one environment step each) per record
  config.checkpoint_every = 5000
  if teacher_states:
    snapshot_reset.configure(config, teacher_states, anneal_env_steps=10_000)
  return config
