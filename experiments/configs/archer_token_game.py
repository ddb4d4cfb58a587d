"""ArCHer on the common small token game (8 items, 3 binary attributes, 4 turns), from BC.

The game, the policy's size, the BC warm start and the evaluation are the common protocol of
every token-game agent (`experiments/configs/token_game_common.py`). The ArCHer loop keeps the
reference's structure (`agents/archer.py::get_config`: γ 0.95, per-step Polyak τ, several critic
steps per actor step, critic-only warm-up) at CPU scale: 64 games of one full episode (4
utterances) per iteration, 10 critic steps and 2 actor steps of batch 128 per iteration.

`train_eval_episodes` plays 64 greedy games inside every iteration, so the log carries the
learning curve: `python -m experiments.plot <workdir> --y=eval_return`.

Measured (CPU shared by ~8 jobs, one seed each; not yet a result):
  * warm start (seed 0 of this config): greedy success 0.73-0.79 over the first 15 iterations
    (64 games each), sampled success 0.57-0.60; a perfect questioner scores 1.0;
  * this config (raw advantage, actor lr 1e-4, "separate" critic):
    `python -m experiments.train --config=experiments/configs/archer_token_game.py
    --workdir=/tmp/archer_A`: greedy success per 5 iterations 0.75, 0.73, 0.79, 1.00, 0.88,
    0.77, 0.78, 0.73, 0.85, 0.89, 0.98, 0.64, 0.72, 0.66, 0.35 (iterations 5-75, 19.2k
    utterances): no sustained gain, then a collapse. The critic's `q_gap` (min-Q of correct minus
    failed final guesses) grew from 0.02 to 0.12 only: it barely tells a right guess from a wrong
    one, so the advantages are mostly noise that Adam turns into full-size steps.
  * 3 seeds vmapped, actor lr 3e-5, `critic_utterance_encoding` "joint" (attention can relate a
    guessed item to the answers) and "separate"; curves, commands and the PPO comparison in
    `experiments/results/ARCHER.md`. With "joint" the critic still does not separate correct
    from wrong guesses within 150 critic steps (q_gap 0.02-0.06), the advantage's spread stays
    0.02-0.07, and the mean greedy success drifts down (0.76 -> 0.68 after 3,840 utterances)
    while token PPO improves from the same start (0.76 -> 0.92 after 7,680). This points at the
    from-scratch critic (its advantage carries no signal yet), not at the actor's step size.
"""

from experiments.configs import token_game_common
from hrljax.agents import archer


def get_config():
  config = archer.get_config()
  token_game_common.game_config(config)
  config.critic_d_model = 64
  config.critic_num_layers = 2
  config.num_envs = 64
  config.num_steps = 4
  config.batch_size = 128
  config.critic_updates = 10
  config.actor_updates = 2
  config.warmup_iters = 5
  config.actor_learning_rate = 1e-4
  config.critic_learning_rate = 3e-4
  config.total_timesteps = 64 * 4 * 150
  config.buffer_size = 20_000
  config.log_every = 5
  config.checkpoint_every = 50
  config.train_eval_episodes = 64
  return config
