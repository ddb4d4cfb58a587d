"""Recovery RL on PointHazard-v0: `sac_pointhazard.py`'s task agent and budget, plus the safety
critic, the recovery policy and the switch (one control step per decision, task action executed).

The safety hyperparameters are the reference's navigation1 task (a 2-D single integrator, the
closest to PointHazard): γ_risk = 0.8, ε_risk = 0.3 (spec `safety_critics.md` §2.5). Changed for a
short CPU run: risk networks of 64 units and batches of 128 (as the task agent); τ_risk = 0.005
instead of 2e-4, because with 2e-4 the risk target stays near its initial 0.5 (sigmoid) for the
~10^4 updates of this run and the reflex then fires everywhere; 1000 pre-training updates
(instead of 10^4) on the risk buffer filled by the first 1000 uniform-random steps. The task SAC
tunes α as the baseline does (see `sac_pointhazard.py` for why not the reference's fixed 0.2).

The recovery policy maximises the task critic among the actions the safety critic rates below
0.1 (`recovery_objective="task"`, a deviation from the paper, see
`recovery_rl.recovery_task_loss`) instead of the reference's minimising Q_risk alone.

Tried (3 seeds each, 30k control steps, greedy evaluation return / violating control steps in
training; SAC: 2.91 / 7,300-8,400; commands and all numbers in `experiments/results/SAFETY.md`):
  * reference recovery (minimise Q_risk), the rest as above: 0.68-0.89 / 21-57 (the task policy
    heads straight for the central hazard and π_rec holds it at the edge; no seed reaches the goal);
  * γ_risk = 0.5 (the reference's default): 0.83-1.01 / 35-244;
  * Q_risk's next action from repeating the executed action (`risk_next_action="controller"`)
    instead of sampling π_task: 0.40-0.78 / 8-126;
  * recovery_objective="task", target 0.1 (this config): 2.88 / 0.83 / 0.86 / 41, 63, 33 (vmapped
    seeds); 2.88 / 0.94 / 0.95 / 42, 56, 50 with `safety_table.py --sequential`, whose program
    rounds differently;
    target 0.25: 2.92 / 0.83 / 0.76 / 50, 95, 12; with γ_risk = 0.5: 0.23-0.98 / 35-317;
    with γ_risk = 0.65: 0.72-0.80 / 28-205; with ε_risk = 0.5: 0.56-1.01 / 99-180; with
    `risk_next_action="controller"`: 0.67-1.53 / 33-264.
  * without action relabelling (`action_relabeling=False`: π_task learns from the executed
    recovery actions): 0.28 / 0.42 / 0.36 / 15, 33, 8.
  * 60k control steps instead of 30k: 2.89 / 0.92 / 1.04 / 51, 290, 295 (seed 2's greedy
    episode ends in the hazard, cost 24).
  * spec §1.3's option (b) with K = 1 (`reflex_mode="end_decision"`,
    `recovery_credit="reflex_state"`: a proposal the reflex rejects is not stored in the task
    buffer): 0.35 / 0.41 / 0.32 / 15, 32, 9. (With "recovery_step" the run is exactly this
    config's: `tests/agents/test_recovery_rl.py`.)
  * the action nearest the task action that Q_risk accepts instead of π_rec's
    (`recovery_action`, `agents.recovery_rl.nearest_safe_action`): "critic_projection" 0.72 /
    0.60 / 0.74 / 18, 44, 17 (with the reference's recovery objective: 0.25 / 0.60 / 0.64),
    "safe_sampling" 0.70 / 0.77 / 0.69 / 37, 35, 18: no seed.
  * the safety critic's Lagrangian on the task actor (`task_risk_penalty`, spec §2.6 LR:
    ν·(Q_risk(s, π_task(s)) − ε) in the task actor loss, ε = 0.3): fixed ν = 0.1 / 1 / 10 / 100:
    0.68 / 0.79 / 0.77, 2.90 / 0.72 / 0.68, 0.58 / 0.75 / 0.64, 0.55 / 0.47 / 0.62 (8-124
    violating steps); ν learned from the reference's 5000: 0.28 / 0.25 / 0.59 (seed 1: 3,307
    violating steps); the hinge ν·max(Q_risk − ε, 0) with ν = 10: 0.70 / 0.83 / 0.78. No new
    seed: the task policy stops short of the hazard by itself (0 interventions in the greedy
    episodes; SAFETY.md, "The safety critic's Lagrangian on the task actor").
  * session 9 (SAFETY.md, "Recovery RL with a long-horizon safety critic (session 9)"), all
    with ε_risk = 0.9 (π_rec as a last resort); return / violating steps, seeds 0-2:
    - γ_risk = 0.95, linear ν = 5: 0.49 / 0.69 / 0.66 / 48, 59, 9; the same with
      task_risk_limit = 0.3: identical (a constant in the linear form);
    - γ_risk = 0.9, ν = 5: 0.64 / 0.68 / 0.64 / 27, 49, 7;
    - γ_risk = 0.99, ν = 5: 0.65 / 0.54 / 0.67 / 79, 50, 12;
    - γ_risk = 0.95, ν = 1: 0.71 / 0.71 / -0.14 / 143, 114, 228;
    - γ_risk = 0.95, hinge ν = 5 above 0.3: 0.76 / 0.23 / 0.79 / 72, 99, 21;
    - γ_risk = 0.95, ν = 5, random_steps = 5000: 0.57 / 1.48 / 0.24 / 11, 31, 3;
    - γ_risk = 0.95, ν = 5, controller = "waypoint": 0.36 / 0.45 / 0.17 / 974, 822, 836;
    - γ_risk = 0.95, no penalty: 0.94 / 2.91 / 0.66 / 521, 1,038, 700;
    - no penalty: 2.92 / 2.91 / 2.89 / 1,128, 2,144, 1,257, evaluation cost 2 / 0 / 1;
      ε_risk = 0.8 instead: 2.92 / 0.84 / 1.72 / 772, 914, 989;
    - hinge ν = 5 above 0.5: 2.89 / 0.42 / 0.83 / 183, 135, 205; ν = 2 above 0.7: 0.75 /
      0.74 / 2.90 / 419, 510, 623; ν = 1 above 0.5: 2.90 / 0.78 / 2.90 / 342, 451, 635;
    - hinge ν = 1 above 0.7: 2.91 / 2.89 / 2.92 / 599, 772, 894 (13 of seeds 0-17 at the goal,
      9.99x fewer violations than SAC, just under the 10x);
    - hinge ν = 1 above 0.6: 2.91 / 2.89 / 2.91 / 470, 684, 666 (13 of seeds 0-17, 11.7x,
      80.5% of SAC's return, evaluation cost 0.78): the three thresholds met, now its own config
      `recovery_rl_lagrangian_pointhazard.py`.
  * session 9, lead: more exploration by the task SAC (ε_risk 0.3 as configured, no penalty),
    `target_entropy` 0 / 1 instead of −|A| = −2: 2.88 / 0.84 / 0.91 / 46, 68, 69 and 1.62 / 0.82
    / 0.75 / 45, 65, 16 (`safety_table.py --seeds=0,1,2 --sequential`): no new seed.
So one seed in three reaches the goal; in the others the task policy learns to stop before the
hazard (greedy episodes with 0-14 interventions) and never finds the detour within 30k steps.
This config stays the paper's Recovery RL (π_task never sees Q_risk) and the base of the short
learning test; the variant that meets the thresholds is `recovery_rl_lagrangian_pointhazard.py`.
"""

from experiments.configs import sac_pointhazard


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = sac_pointhazard.get_config(layout)  # the same task agent, task and budget
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
  config.recovery_objective = "task"
  config.recovery_risk_target = 0.1
  config.recovery_risk_weight = 100.0
  return config
