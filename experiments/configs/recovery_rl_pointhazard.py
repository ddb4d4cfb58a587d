"""Recovery RL on PointHazard-v0: `sac_pointhazard.py`'s task agent and budget, plus the safety
critic, the recovery policy and the switch (one control step per decision, task action executed).

The safety hyperparameters are the reference's navigation1 task (a 2-D single integrator, the
closest to PointHazard): γ_risk = 0.8, ε_risk = 0.3. Changed for a short CPU run: risk networks
of 64 units and batches of 128; τ_risk = 0.005 instead of 2e-4 (with 2e-4 the risk target stays
near its initial 0.5 for the ~10^4 updates of this run and the switch fires everywhere); 1000
pre-training updates on the first 1000 uniform-random steps. The recovery policy follows the
task critic among the actions Q_risk rates below 0.1 (`recovery_objective="task"`, a deviation
from the paper). The variants tried and their numbers: `experiments/results/SAFETY.md`.
"""

from experiments.configs import sac_pointhazard


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = sac_pointhazard.get_config(layout)  # the same task agent, task and budget
  config.agent = "recovery_rl"
  config.reflex = True
  config.risk_buffer_size = 30_000  # the whole run fits
  config.risk_batch_size = 128
  config.risk_hidden_sizes = (64, 64)
  config.risk_gamma = 0.8  # the reference's navigation1
  config.risk_epsilon = 0.3  # the reference's navigation1
  config.risk_tau = 0.005
  config.risk_pretrain_updates = 1000
  config.risk_updates_per_step = 1
  config.recovery_objective = "task"  # follow Q_task among the safe actions
  config.recovery_risk_target = 0.1  # ε_rec
  config.recovery_risk_weight = 100.0  # λ
  return config
