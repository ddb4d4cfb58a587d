"""PULSE-style high level on four rooms after the goal moved: PPO in the latent space of frozen
skills distilled from an expert of the first goal.

Luo et al. 2024 (arXiv:2310.04582), Section 3.3: a Gaussian high-level action a_hi, the frozen
decoder acting with z = μ_p(s) + a_hi. The skill model is the first seed's of the distillation run
`runs/skills/distill` (`latent_skills_distill_fourrooms.py`; `--config.skill_run=<workdir>` for
another). The task is the four-rooms transfer task of `option_critic_fourrooms.py` with the goal
already moved: the goal is the lower-right-room cell that `transfer_seed` 0 draws,
(11, 8) (`--config.env_kwargs.goal="(r, c)"` for another), from the first step. PPO's
hyperparameters are `ppo_fourrooms.py`'s; the flat baseline on the same task is
`ppo_fourrooms_moved.py`.
"""

from experiments.configs import ppo_fourrooms_moved
from hrljax.agents import latent_skills


def get_config():
  config = latent_skills.get_config()
  config.mode = "high_level"
  flat = ppo_fourrooms_moved.get_config()
  config.env_name = flat.env_name
  config.env_kwargs.observation = flat.env_kwargs.observation
  config.env_kwargs.goal = flat.env_kwargs.goal  # the moved goal
  config.skill_run = "runs/skills/distill"
  config.decoder_action = "sample"  # the decoder's action is a sample at z
  for field in ("num_envs", "num_steps", "total_timesteps", "anneal_lr", "log_every"):
    config[field] = flat[field]  # the flat baseline's budget and schedule
  config.eval_every = flat.eval_every
  config.checkpoint_every = flat.checkpoint_every
  return config
