"""PULSE-style distillation on four rooms: the latent-skill model learns a trained PPO expert.

Luo et al. 2024 (arXiv:2310.04582), Section 3.2, on the option-critic four-rooms task (one-hot
cells, the goal in the east doorway). The expert is a `ppo_fourrooms` run trained first into
`runs/skills/expert` (`--config.expert_run=<workdir>` for another); the student (encoder,
learned prior, decoder) acts and the expert labels its visits (DAgger). Its greedy evaluation
(z = prior mean, the decoder's mode) sits beside the expert's (`eval_expert_*`). The skill model
of this run's first seed is what `latent_skills_fourrooms.py` steers after the goal moves.
"""

from experiments.configs import ppo_fourrooms
from hrljax.agents import latent_skills


def get_config():
  config = latent_skills.get_config()
  config.mode = "distill"
  expert = ppo_fourrooms.get_config()
  config.env_name = expert.env_name  # the expert's task, goal unmoved
  config.env_kwargs.observation = expert.env_kwargs.observation
  config.expert_run = "runs/skills/expert"
  config.expert_action = "sample"  # labels: samples of the expert's policy
  config.student_latent = "prior"  # the student acts with z ~ p(z | s), as the high level will
  config.num_envs = 16
  config.num_steps = 32  # a rollout of 16 x 32 relabelled visits per update
  config.total_timesteps = 200_000  # environment steps of the student
  config.latent_dim = 8
  config.skill_hidden_sizes = (64, 64)
  config.skill_learning_rate = 1e-3
  config.distill_epochs = 4
  config.kl_coef_start = 0.01  # PULSE's λ_KL, annealed...
  config.kl_coef_end = 0.001  # ...to this
  config.ar_coef = 0.005  # PULSE's λ_AR
  config.log_every = 20
  config.eval_every = 60  # greedy evaluations of student and expert (32 episodes each)
  config.checkpoint_every = 120
  return config
