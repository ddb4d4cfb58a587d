"""Recovery RL on PointHazard-v0: `sac_pointhazard.py`'s task agent and budget, plus the safety
critic, the recovery policy and the switch (one control step per decision, task action executed).

The safety hyperparameters are the reference's navigation1 task (a 2-D single integrator, the
closest to PointHazard): γ_risk = 0.8, ε_risk = 0.3 (spec `safety_critics.md` §2.5). Changed for a
short CPU run: risk networks of 64 units and batches of 128 (as the task agent); τ_risk = 0.005
instead of 2e-4, because with 2e-4 the risk target stays near its initial 0.5 (sigmoid) for the
~10^4 updates of this run and the reflex then fires everywhere; 1000 pre-training updates
(instead of 10^4) on the risk buffer filled by the first 1000 uniform-random steps. The task SAC
tunes α as the baseline does (see `sac_pointhazard.py` for why not the reference's fixed 0.2).

Measured (3 seeds, last 10% of updates): no violation (episode cost 0), 21-57 violating control
steps during training (SAC: 7,300-8,400), but return 0.68-0.89 against SAC's 2.91: the task
policy heads straight for the central hazard and π_rec holds the robot at its edge until the
time limit; no seed reaches the goal.
"""

from experiments.configs import sac_pointhazard


def get_config():
  config = sac_pointhazard.get_config()  # the same task agent, task and budget
  config.agent = "recovery_rl"
  config.reflex = True
  config.risk_buffer_size = 30_000
  config.risk_batch_size = 128
  config.risk_hidden_sizes = (64, 64)
  config.gamma_risk = 0.8
  config.eps_risk = 0.3
  config.tau_risk = 0.005
  config.risk_pretrain_updates = 1000
  config.risk_updates_per_step = 1
  return config
