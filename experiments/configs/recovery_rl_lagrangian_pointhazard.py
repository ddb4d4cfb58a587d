"""Recovery RL on PointHazard with the switch as a last resort and a hinge penalty of the safety
critic on the task actor: the variant of `recovery_rl_pointhazard.py` that meets issue 7's three
thresholds (over seeds 0-2 and 0-8 with a margin, over seeds 0-17 at the edge).

Changes against `recovery_rl_pointhazard.py` (everything else is that config, γ_risk = 0.8
included):
  * `eps_risk` 0.9 instead of 0.3: π_rec takes over only where Q_risk is close to certain, so
    the switch no longer holds the robot in front of the central hazard;
  * `task_risk_penalty="fixed"`, `task_risk_form="hinge"`, `task_risk_limit=0.6` (ν stays the
    agent's default 1): ν·max(Q_risk(s, a) − 0.6, 0) is added to the task actor's loss at its
    reparameterised action a (`agents.recovery_rl.task_risk_penalty_fn`; the hinge form of the
    LR baseline of Thananjeyan et al. 2021's code and of SQRL's constrained update, Srinivasan
    et al. 2020). It pushes only the actions the critic rates above 0.6. Why a hinge: the
    linear term ν·(Q_risk − ε) pushes at every state, and the task critic is nearly flat in the
    action before the detour has been found (along one stopped linear-penalty run's greedy path
    its values over 8 directions differ by < 0.01, its action gradient is at most 0.007 against
    the penalty's up to 0.003 at ν = 5 and Q_risk ≈ 0.001), so the penalty far from every hazard
    outweighs the task and the robot learns to stop in front of the hazards
    (`experiments/results/SAFETY.md`, "Recovery RL with a long-horizon safety critic
    (session 9)").

Measured (30k control steps, `experiments.safety_table --sequential`, against SAC's seeds 0-2,
`sac_pointhazard.py`: 7,508 / 8,340 / 8,492 violating steps, evaluation return 2.890 / 2.941 /
2.936, cost 9):
  * seeds 0-2: 3 of 3 reach the goal, 99.4% of the return, 13.4x fewer violating control steps
    in training (mean 607), evaluation cost 0;
  * seeds 0-8: 8 of 9, 94.2%, 14.4x (mean 565), evaluation cost 0;
  * seeds 0-17: 13 of 18, 80.5%, 11.7x (mean 693; seed 17: 2,517), evaluation cost 0.78 (seed
    9: 12, seed 12: 2, the others 0; threshold 0.9).
The greedy paths that reach the goal go through one of the 0.07-wide gaps beside the central
hazard (about 37 control steps, no intervention). With `task_risk_limit=0.7`: seeds 0-8 7 of 9,
90.7%, 10.7x, cost 0; seeds 0-17 82.1%, 9.99x, cost 0 (misses the 10x). ε = 0.9 without the
penalty: 3 of 3 seeds at the goal, but 5.4x fewer violations and greedy evaluation costs 2 / 0 /
1; the linear penalty (ν = 0.3-5, γ_risk 0.8-0.99): 0-1 of 3 seeds.

  python -m experiments.safety_table \
      --config=experiments/configs/recovery_rl_lagrangian_pointhazard.py --seeds=0,1,2 --sequential
"""

from experiments.configs import recovery_rl_pointhazard


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = recovery_rl_pointhazard.get_config(layout)
  config.eps_risk = 0.9
  config.task_risk_penalty = "fixed"
  config.task_risk_form = "hinge"
  config.task_risk_limit = 0.6
  return config
