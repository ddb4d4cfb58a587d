"""Jitted, vmapped rollouts of gymnax-API environments, one scheme per module.

* `plain`: `N` environments stepped `T` steps in one `lax.scan` (`rollout`), greedy `evaluate`,
  episode statistics.
* `grouped`: `G` tasks x `K` samples, one whole episode per sample (GRPO, GiGPO, RLOO).
* `two_level`: `G` subgoals per decision state x `K` low-level segments per subgoal, every
  segment branched from the same saved state (Hi-Agent; used as a module, `rollout.two_level`).
* `two_rate`: a policy deciding every `K` control steps, a controller and a per-control-step
  safety layer (Bresa, Recovery RL); `two_rate_streams`: the replay transitions and episode cost
  statistics agents read from its trajectories (used as a module, `rollout.two_rate_streams`).
* `call_and_return`: options executed call-and-return (option-critic): the option in force, its
  termination and the policy over options at every step, option-duration evaluation and option
  statistics (used as a module, `rollout.call_and_return`).

The acting policy is a pure function `policy_fn(params, obs, key) -> (action, extras)` over a
batch of observations; whatever it returns in `extras` (log-probs, values, options, ...) is stored
per step. Terminated and truncated are kept apart, and the true successor observation (before
auto-reset) is stored in `Transition.next_obs` so that truncated steps can bootstrap. Every public
name of `plain`, `grouped` and `two_rate` is re-exported here (`rollout.two_rate_rollout`, ...).
"""

from hrljax.rollout.grouped import (
  EpisodeSummary,
  GroupedEpisodes,
  episode_sums,
  first_episode_mask,
  grouped_episodes,
  grouped_ids,
  grouped_reset,
  reset_groups,
  summarize_episodes,
)
from hrljax.rollout.plain import (
  PolicyFn,
  episode_end_terms,
  episode_statistics,
  env_step_keys,
  evaluate,
  reset,
  rollout,
  rollout_env_keys,
  rollout_statistics,
  step,
  step_with_env_keys,
  step_with_info,
  step_with_keys,
  tree_index,
)
from hrljax.rollout.two_rate import (
  RECOVERY_CREDITS,
  ControllerFn,
  ControlSteps,
  EndDecisionTrajectory,
  Reflex,
  SafetyFn,
  TwoRateTrajectory,
  no_safety_layer,
  reflex_safety_fn,
  two_rate_rollout,
  two_rate_rollout_end_decision,
)
