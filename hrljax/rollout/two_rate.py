"""Two-rate rollouts: a task policy deciding every K control steps, a controller expanding each
decision into K low-level actions, and a per-control-step safety layer (Bresa, Recovery RL); and
the episode cost and violation statistics of their control-rate streams.

The decision step and the two behaviours after a reflex (option (a): the recovery finishes the
decision; option (b): the reflex ends it) are described in `docs/safety.md`, after Bresa (Zhang,
Solak, Ajoudani, "Bresa: Bio-inspired Reflexive Safe Reinforcement Learning for Contact-Rich
Robotic Tasks", arXiv:2503.21989).
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from hrljax.rollout.grouped import _check_positive_int
from hrljax.rollout.plain import PolicyFn, rollout_env_keys, step_with_env_keys, tree_index
from hrljax.types import Array, EnvCarry, PyTree, Transition


ControllerFn = Callable[[PyTree, Array], Array]
SafetyFn = Callable[[PyTree, PyTree, Array, Array, Array], tuple[Array, Array]]


class ControlSteps(NamedTuple):
  """The control-rate stream of a two-rate rollout, every field `[T, K, N, ...]`.

  `active` is False at the control steps an environment skipped because its episode ended earlier
  in the same decision (the environment is frozen until the next decision); every other field is
  meaningless there. `info` holds the environment's per-step info entries named in the rollout's
  `info_keys` (e.g. PointHazard's `cost` and `violation`).
  """

  obs: PyTree  # observation the low-level action was taken from
  proposed_action: Array  # the controller's action
  action: Array  # the executed action (the safety layer's output)
  intervened: Array  # bool: the safety layer changed the proposed action
  reward: Array  # float32
  terminated: Array  # bool
  truncated: Array  # bool
  next_obs: PyTree  # true successor (before any auto-reset)
  info: dict
  active: Array  # bool: the environment stepped at this control step


class TwoRateTrajectory(NamedTuple):
  """What `two_rate_rollout` returns.

  `decision` is a `Transition` `[T, N]` at the decision rate: `obs` where the decision was taken,
  `action` the task policy's command, `reward` the undiscounted sum of the rewards of the decision's
  control steps, `terminated`/`truncated` whether the episode ended inside the decision (and how),
  `next_obs` the true successor after the decision's last executed control step,
  `policy_extras` what the task policy returned, `episode_return/length` (length in control
  steps) valid where `done`. `num_substeps` `[T, N]` counts the control steps the decision
  executed (K unless the episode ended first): bootstrap a decision with `gamma ** num_substeps`
  (the SMDP discount). `intervened` `[T, N]`: the safety layer intervened at some control step of
  the decision. `control` is the `[T, K, N]` stream of every control step.
  """

  decision: Transition
  num_substeps: Array
  intervened: Array
  control: ControlSteps


class Reflex(NamedTuple):
  """A switching safety layer given by its parts, so that the rollout can batch its checks.

  `trigger_fn(safety_params, obs [B], proposed [B, A]) -> fires [B] bool` is the check (e.g. the
  risk critic above ε); it is row-wise, so the rollout may call it on any batch B (one control
  step's N rows, or a whole decision's K * N). `recovery_fn(safety_params, obs [N], proposed
  [N, A], noise) -> action [N, A]` is the action that replaces the proposed one where the layer
  intervenes (`proposed` is the controller's nominal action at that control step, for a recovery
  that stays near it; `noise` is the control step's key, or its slice of the rollout's
  `safety_noise_fn` draw).
  With `latch` (static), once the layer intervened in an environment it keeps the recovery
  action until the decision ends (option (a) of `docs/safety.md`); without, it intervenes exactly where
  `trigger_fn` fires. `reflex_safety_fn(reflex)` is the same layer as a per-step `SafetyFn`.
  """

  trigger_fn: Callable[[PyTree, PyTree, Array], Array]
  recovery_fn: Callable[[PyTree, PyTree, Array, PyTree], Array]
  latch: bool


def reflex_safety_fn(reflex: Reflex) -> SafetyFn:
  """The per-control-step `SafetyFn` of a `Reflex`: check, then switch.

  The recovery action is computed only when some environment needs it (`lax.cond`): computing it
  unconditionally was measured 8-18% slower in process CPU time (1 and 16 environments, 10% of
  the control steps intervened). Under a `vmap` the `lax.cond` becomes a `select` of both sides.
  """

  def safety_fn(safety_params, obs, proposed, noise, latched):
    fires = reflex.trigger_fn(safety_params, obs, proposed)
    intervened = fires | latched if reflex.latch else fires
    recovery = jax.lax.cond(
      jnp.any(intervened),
      lambda: reflex.recovery_fn(safety_params, obs, proposed, noise),
      lambda: proposed,
    )
    return jnp.where(intervened[:, None], recovery, proposed), intervened

  return safety_fn


def no_safety_layer(safety_params, obs, proposed_action, key, latched):
  """The identity safety layer: executes the proposed action, never intervenes."""
  del safety_params, obs, key, latched
  return proposed_action, jnp.zeros(proposed_action.shape[:1], bool)


def _select_envs(active: Array, new: PyTree, old: PyTree) -> PyTree:
  """Per environment (leading axis N): `new` where `active`, else `old`."""

  def pick(n, o):
    return jnp.where(active.reshape(active.shape + (1,) * (n.ndim - 1)), n, o)

  return jax.tree.map(pick, new, old)


def two_rate_rollout(
  env,
  env_params,
  policy_fn: PolicyFn,
  params: PyTree,
  controller_fn: ControllerFn,
  safety_fn,
  safety_params: PyTree,
  carry: EnvCarry,
  key: Array,
  num_decisions: int,
  control_steps: int,
  info_keys: tuple[str, ...] = (),
  unroll: int = 1,
  safety_noise_fn: Optional[Callable[[Array, tuple[int, int]], PyTree]] = None,
  lookahead: bool = True,
) -> tuple[EnvCarry, TwoRateTrajectory]:
  """Runs `num_decisions` decisions of K = `control_steps` control steps in every environment.

  The whole rollout is one `lax.scan` over decisions with a nested loop over control steps
  (`docs/safety.md`, after Bresa: Zhang, Solak, Ajoudani, arXiv:2503.21989). At each
  decision `policy_fn(params, obs [N], key) -> (command [N, ...], extras)` picks a command; at each
  control step j of it:

  1. `controller_fn(obs [N], command [N, ...]) -> proposed [N, A]` (e.g. waypoint tracking);
  2. the safety layer may replace the action (a reflex, a shield). `safety_fn` is either a
     `SafetyFn` `(safety_params, obs, proposed, key, latched) -> (executed [N, A], intervened [N])`,
     where `latched` [N] bool tells the layer whether it intervened at an earlier control step of
     the same decision (a per-step shield ignores it; `no_safety_layer` for none), or a `Reflex`;
  3. the environment steps with the executed action (auto-resetting an ended episode).

  An environment whose episode ends inside a decision is frozen for the decision's remaining
  control steps (`ControlSteps.active` False) and starts the next decision from its reset
  observation, so every decision belongs to one episode. Both the proposed and the executed
  action are recorded, with whether the layer intervened. With K = 1, `controller_fn` returning
  the command and `no_safety_layer`, the actions, rewards and keys are exactly those of `rollout`.

  **Lookahead for a latching `Reflex`** (`lookahead=True`): the nominal low-level actions of a
  decision are known in advance, so the decision is first simulated with them (the controller and
  the environment only), all its K * N (state, proposed action) pairs are checked with ONE
  `trigger_fn` call, and only if the layer would act somewhere the decision is simulated again
  from the first such control step, with the recovery action where it applies. Until the first
  step at which the layer fires in an active environment, that environment's actual trajectory
  is the nominal one, and from that step on the latch holds, so no further check is needed: the
  records, carry and keys are exactly those of the per-step layer `reflex_safety_fn(reflex)`
  (`lookahead=False`, tested on random parameters), at the price of the nominal control steps
  after the first reflex, which are simulated twice. That price is paid in every decision when
  the reflex fires in some environment of most decisions (a large batch, an untrained critic),
  so a decision that follows one in which the reflex fired runs per step (`lax.cond`; the result
  is the same either way). Measured in `experiments/benchmarks/two_rate.py`. A non-latching
  `Reflex` always runs per step (after a reflex it may hand back to the nominal action, so every
  check needs the actual state).

  Keys: the policy and environment keys are split as in `rollout` (the env keys as
  `[T, K, N]`); the safety layer's keys come from `fold_in(key, 1)`.

  Args:
    info_keys: names of `info` entries (per-step, leading axis N) to record in `control.info`.
    unroll: passed to the decision-level `lax.scan`.
    safety_noise_fn: if given, `safety_noise_fn(fold_in(key, 1), (T, K)) -> noise` (leading axes
      `[T, K]`) draws the safety layer's randomness for the whole rollout at once, and the layer
      gets its control step's slice in place of a key (as `rollout`'s `noise_fn`: on CPU one
      batched draw is much cheaper than a threefry call per control step).
    lookahead: for a latching `Reflex`, check each decision's nominal actions in one batched call
      (above); False runs the reflex per control step.
  """
  _check_positive_int("num_decisions", num_decisions)
  _check_positive_int("control_steps", control_steps)
  policy_keys, env_keys, safety_keys = _two_rate_keys(
    env, key, num_decisions, control_steps, carry.running_return.shape[0], safety_noise_fn
  )
  layer = reflex_safety_fn(safety_fn) if isinstance(safety_fn, Reflex) else safety_fn
  per_step = _per_step_decision(env, env_params, controller_fn, layer, safety_params, info_keys)
  if isinstance(safety_fn, Reflex) and safety_fn.latch and lookahead:
    ahead = _lookahead_decision(env, env_params, controller_fn, safety_fn, safety_params, info_keys)

    def run_decision(carry, fired_before, *inputs):
      # Both branches compute the same decision; the lookahead pays off only when the reflex
      # stays quiet, which the previous decision predicts.
      return jax.lax.cond(fired_before, per_step, ahead, carry, *inputs)
  else:
    run_decision = lambda carry, fired_before, *inputs: per_step(carry, *inputs)

  def decision_step(state, inputs):
    carry, fired_before = state
    policy_key, env_keys, safety_keys = inputs
    command, extras = policy_fn(params, carry.obs, policy_key)
    carry, (steps, returns, lengths) = run_decision(
      carry, fired_before, command, env_keys, safety_keys
    )
    decision = _decision_transition(steps, command, extras, returns, lengths)
    intervened = jnp.any(steps.intervened, axis=0)
    trajectory = TwoRateTrajectory(
      decision=decision,
      num_substeps=steps.active.sum(axis=0).astype(jnp.int32),
      intervened=intervened,
      control=steps,
    )
    return (carry, jnp.any(intervened)), trajectory

  (carry, _), trajectory = jax.lax.scan(
    decision_step, (carry, jnp.zeros((), bool)), (policy_keys, env_keys, safety_keys), unroll=unroll
  )
  return carry, trajectory


def _two_rate_keys(
  env, key: Array, num_decisions: int, control_steps: int, num_envs: int, safety_noise_fn
) -> tuple[Array, PyTree, PyTree]:
  """The keys of a two-rate rollout, split before its loop: the policy's `[T]`, the
  environments' `[T, K, N]` (`rollout_env_keys`, as `rollout` splits them) and the safety
  layer's `[T, K]` (or `safety_noise_fn`'s draw, leading axes `[T, K]`) from `fold_in(key, 1)`."""
  policy_key, env_key = jax.random.split(key)
  policy_keys = jax.random.split(policy_key, num_decisions)
  env_keys = rollout_env_keys(env, env_key, (num_decisions, control_steps, num_envs))
  safety_key = jax.random.fold_in(key, 1)
  safety_keys = (
    jax.random.split(safety_key, num_decisions * control_steps).reshape(
      num_decisions, control_steps
    )
    if safety_noise_fn is None
    else safety_noise_fn(safety_key, (num_decisions, control_steps))
  )
  return policy_keys, env_keys, safety_keys


def _control_step(
  env,
  env_params,
  info_keys,
  carry: EnvCarry,
  active: Array,
  proposed: Array,
  executed: Array,
  intervened: Array,
  env_keys: PyTree,
):
  """One control step of every environment with the given executed actions; the frozen
  (inactive) environments keep their carry. `(carry, still active, (record, returns, lengths))`."""
  new_carry, transition, info = step_with_env_keys(env, env_params, carry, executed, env_keys)
  record = ControlSteps(
    obs=transition.obs,
    proposed_action=proposed,
    action=executed,
    intervened=intervened & active,
    reward=transition.reward,
    terminated=transition.terminated,
    truncated=transition.truncated,
    next_obs=transition.next_obs,
    info={name: info[name] for name in info_keys},
    active=active,
  )
  carry = _select_envs(active, new_carry, carry)
  return (
    carry,
    active & ~transition.done,
    (record, transition.episode_return, transition.episode_length),
  )


def _per_step_decision(env, env_params, controller_fn, safety_fn, safety_params, info_keys):
  """`run(carry, command, env_keys (leading axes [K, N]), safety_keys [K, ...])`: one decision,
  the safety layer consulted at every control step."""

  def control_step(state, inputs):
    carry, command, active, latched = state
    env_keys, safety_key = inputs
    proposed = controller_fn(carry.obs, command)
    executed, intervened = safety_fn(safety_params, carry.obs, proposed, safety_key, latched)
    carry, still_active, outputs = _control_step(
      env, env_params, info_keys, carry, active, proposed, executed, intervened, env_keys
    )
    return (carry, command, still_active, latched | (intervened & active)), outputs

  def run(carry, command, env_keys, safety_keys):
    num_envs = carry.running_return.shape[0]
    start = (carry, command, jnp.ones((num_envs,), bool), jnp.zeros((num_envs,), bool))
    (carry, _, _, _), outputs = jax.lax.scan(control_step, start, (env_keys, safety_keys))
    return carry, outputs

  return run


def _lookahead_decision(env, env_params, controller_fn, reflex: Reflex, safety_params, info_keys):
  """`run(carry, command, env_keys (leading axes [K, N]), safety_keys [K, ...])`: one decision
  of a latching reflex, checked in one batched call on the nominal trajectory (see
  `two_rate_rollout`)."""

  def nominal_step(state, env_keys):
    carry, command, active = state
    proposed = controller_fn(carry.obs, command)
    no = jnp.zeros(proposed.shape[:1], bool)
    new_carry, still_active, outputs = _control_step(
      env, env_params, info_keys, carry, active, proposed, proposed, no, env_keys
    )
    return (new_carry, command, still_active), (outputs, carry)

  def run(carry, command, env_keys, safety_keys):
    num_steps, num_envs = jax.tree.leaves(env_keys)[0].shape[:2]
    start = (carry, command, jnp.ones((num_envs,), bool))
    (end_carry, _, _), (outputs, carries) = jax.lax.scan(nominal_step, start, env_keys)
    steps = outputs[0]
    flat = lambda x: x.reshape((num_steps * num_envs,) + x.shape[2:])
    fires = reflex.trigger_fn(
      safety_params, jax.tree.map(flat, steps.obs), flat(steps.proposed_action)
    ).reshape(num_steps, num_envs)
    # Where the per-step layer would execute the recovery action: at every firing step (the
    # inactive ones too: the layer acts there, only the environment does not move), and from the
    # first firing step of an active environment on (the latch).
    onset = fires & steps.active
    step_index = jnp.arange(num_steps)[:, None]
    latched_from = jnp.where(onset.any(axis=0), jnp.argmax(onset, axis=0), num_steps)
    recover = fires | (step_index >= latched_from[None, :])
    first = jnp.argmax(recover.any(axis=1))

    def resimulate(_):
      def body(j, state):
        carry, active, outputs = state
        proposed = controller_fn(carry.obs, command)
        noise = tree_index(safety_keys, j)
        recovery = reflex.recovery_fn(safety_params, carry.obs, proposed, noise)
        executed = jnp.where(recover[j][:, None], recovery, proposed)
        carry, active, step_outputs = _control_step(
          env,
          env_params,
          info_keys,
          carry,
          active,
          proposed,
          executed,
          recover[j],
          tree_index(env_keys, j),
        )
        outputs = jax.tree.map(
          lambda all_steps, one: all_steps.at[j].set(one), outputs, step_outputs
        )
        return carry, active, outputs

      start = (tree_index(carries, first), steps.active[first], outputs)
      carry, _, new_outputs = jax.lax.fori_loop(first, num_steps, body, start)
      return carry, new_outputs

    return jax.lax.cond(recover.any(), resimulate, lambda _: (end_carry, outputs), None)

  return run


def _decision_transition(
  steps: ControlSteps, command: Array, extras: PyTree, returns: Array, lengths: Array
) -> Transition:
  """The decision-level `Transition` `[N]` of one decision's `[K, N]` control steps."""
  active = steps.active
  last = jnp.sum(active, axis=0) - 1  # every decision executes its first control step
  env_index = jnp.arange(active.shape[1])
  at_last = lambda x: x[last, env_index]
  return Transition(
    obs=tree_index(steps.obs, 0),
    action=command,
    reward=jnp.sum(jnp.where(active, steps.reward, 0.0), axis=0),
    terminated=jnp.any(steps.terminated & active, axis=0),
    truncated=jnp.any(steps.truncated & active, axis=0),
    next_obs=jax.tree.map(at_last, steps.next_obs),
    policy_extras=extras,
    episode_return=at_last(returns),
    episode_length=at_last(lengths),
  )


# ----------------------------------------------------------------------------------------------
# Two-rate rollouts in which a reflex ends the decision (option (b) of `docs/safety.md`).
# ----------------------------------------------------------------------------------------------

RECOVERY_CREDITS = ("reflex_state", "recovery_step")


class EndDecisionTrajectory(NamedTuple):
  """What `two_rate_rollout_end_decision` returns; every field `[T, K, N, ...]`, one entry per
  control step (T windows of K control steps, the layout of `TwoRateTrajectory.control`).

  `decision[t, j, n]` is the task decision of environment n that ended at control step (t, j),
  valid where `valid`: `obs` where it was taken, `action` the command, `reward` the undiscounted
  sum of the rewards of its `num_substeps` control steps, `next_obs` its successor (bootstrap with
  `gamma ** num_substeps`), `terminated`/`truncated` whether the episode ended with it,
  `policy_extras` what the task policy returned. `intervened`: the reflex ended the decision.
  `control` is the control-rate stream (`active` is True everywhere: no environment is frozen),
  `command` the task command in force at each control step, `episode_return`/`episode_length`
  the running episode statistics after each control step (valid where the control step is done).
  """

  decision: Transition
  valid: Array
  num_substeps: Array
  intervened: Array
  control: ControlSteps
  command: Array
  episode_return: Array
  episode_length: Array


class _OpenDecision(NamedTuple):
  """Per environment (leading axis N): the task decision currently executing."""

  open: Array  # bool: a decision is running (False: the task policy decides at this step)
  obs: PyTree  # where it was taken
  command: Array
  extras: PyTree
  reward: Array  # float32: rewards of its control steps so far
  taken: Array  # int32: its control steps so far


def two_rate_rollout_end_decision(
  env,
  env_params,
  policy_fn: PolicyFn,
  params: PyTree,
  controller_fn: ControllerFn,
  reflex: Reflex,
  safety_params: PyTree,
  carry: EnvCarry,
  key: Array,
  num_decisions: int,
  control_steps: int,
  info_keys: tuple[str, ...] = (),
  unroll: int = 1,
  safety_noise_fn: Optional[Callable] = None,
  recovery_credit: str = "reflex_state",
) -> tuple[EnvCarry, EndDecisionTrajectory]:
  """`num_decisions * control_steps` control steps in which a reflex ends the task decision.

  Option (b) of the behaviour after a reflex (`docs/safety.md`; the Bresa flowchart:
  Zhang, Solak, Ajoudani, arXiv:2503.21989): a task decision executes the controller's nominal
  actions for up to K = `control_steps` control steps; if `reflex.trigger_fn` fires on a nominal
  action, the decision ends there, the control step is executed by `reflex.recovery_fn`, and the
  task policy decides again at the next control step. If the new command's first nominal action
  fires the reflex too, π_rec acts again: π_rec holds control until the task policy proposes a
  command whose nominal action the reflex lets through (one control step at a time). A decision
  also ends when the episode ends and at the end of the rollout (the last of its
  `num_decisions * K` control steps; the next rollout starts with a new decision), where it is
  bootstrapped like any other.

  Decisions are of variable length, so the rollout is one `lax.scan` over control steps, and a
  decision is written at the control step where it ends (`EndDecisionTrajectory.valid`): at most
  one per environment and control step. `recovery_credit` says what a decision ended by the
  reflex contains:

  * "reflex_state" (the decision ends at the reflex): its `num_substeps` n
    are the nominal control steps before the reflex, its successor the state at the reflex
    (where π_rec takes over), its reward theirs; π_rec's control step belongs to no task
    decision, and a command rejected at its first control step (n = 0) is not a decision (nothing
    of it was executed; not valid);
  * "recovery_step": the decision also contains π_rec's control step (n = nominal steps + 1, the
    successor after it, its reward included), so that the task decision that was cut ends where
    the task policy decides again: from the task policy's view π_rec's step is part of the
    environment (an SMDP option interrupted by the environment), and a rejected command is
    stored with what rejecting it led to, as Recovery RL's action relabelling does.

  With a reflex that never fires and episodes that do not end inside a decision, the decisions,
  commands, actions and keys are those of `two_rate_rollout` (option (a)): decision d of the
  rollout starts at control step d·K with the policy key `two_rate_rollout` gives decision d
  (a decision starting at control step j of window d gets `fold_in(that key, j)`), and the
  environment and safety keys are split as there.
  """
  _check_positive_int("num_decisions", num_decisions)
  _check_positive_int("control_steps", control_steps)
  if not isinstance(reflex, Reflex):
    raise ValueError(
      f"reflex: expected a rollout.Reflex (its check and its recovery action), "
      f"got {type(reflex).__name__}"
    )
  if recovery_credit not in RECOVERY_CREDITS:
    raise ValueError(
      f"recovery_credit: expected one of {RECOVERY_CREDITS}, got {recovery_credit!r}"
    )
  num_envs = carry.running_return.shape[0]
  window_keys, env_keys, safety_keys = _two_rate_keys(
    env, key, num_decisions, control_steps, num_envs, safety_noise_fn
  )
  policy_keys = jax.vmap(
    lambda k: jax.vmap(lambda j: jax.random.fold_in(k, j))(jnp.arange(control_steps))
  )(window_keys)
  # Step 0 of a window uses the window's own key, as `two_rate_rollout`'s decision does.
  policy_keys = policy_keys.at[:, 0].set(window_keys)
  num_steps = num_decisions * control_steps
  flat = lambda x: x.reshape((num_steps,) + x.shape[2:])
  last = jnp.arange(num_steps) == num_steps - 1
  inputs = (flat(policy_keys), jax.tree.map(flat, env_keys), jax.tree.map(flat, safety_keys), last)

  command_shape, extras_shape = jax.eval_shape(policy_fn, params, carry.obs, window_keys[0])
  zeros = lambda s: jnp.zeros(s.shape, s.dtype)
  start = _OpenDecision(
    open=jnp.zeros((num_envs,), bool),
    obs=carry.obs,
    command=zeros(command_shape),
    extras=jax.tree.map(zeros, extras_shape),
    reward=jnp.zeros((num_envs,), jnp.float32),
    taken=jnp.zeros((num_envs,), jnp.int32),
  )
  credit_recovery = recovery_credit == "recovery_step"
  # Option (b) never latches: the reflex's switch is consulted afresh at every control step.
  switch = reflex_safety_fn(reflex._replace(latch=False))
  every_env = jnp.ones((num_envs,), bool)

  def control_step(state, inputs):
    carry, decision = state
    policy_key, env_keys, noise, last = inputs
    decision = _maybe_decide(policy_fn, params, carry.obs, policy_key, decision)
    proposed = controller_fn(carry.obs, decision.command)
    executed, fires = switch(safety_params, carry.obs, proposed, noise, ~every_env)
    new_carry, _, (record, episode_return, episode_length) = _control_step(
      env, env_params, info_keys, carry, every_env, proposed, executed, fires, env_keys
    )
    # The control steps this decision counts: all of its own; π_rec's only with "recovery_step".
    counted = ~fires | credit_recovery
    reward = decision.reward + jnp.where(counted, record.reward, 0.0)
    taken = decision.taken + counted.astype(jnp.int32)
    done = record.terminated | record.truncated
    ends = fires | done | (taken == control_steps) | last
    ends_with_step = counted & ends  # its successor is this control step's
    ended = Transition(
      obs=decision.obs,
      action=decision.command,
      reward=reward,
      terminated=ends_with_step & record.terminated,
      truncated=ends_with_step & record.truncated,
      next_obs=_select_envs(ends_with_step, record.next_obs, carry.obs),
      policy_extras=decision.extras,
      episode_return=episode_return,
      episode_length=episode_length,
    )
    outputs = (
      ended,
      ends & (taken > 0),
      taken,
      fires,
      record,
      decision.command,
      episode_return,
      episode_length,
    )
    decision = decision._replace(open=~ends, reward=reward, taken=taken)
    return (new_carry, decision), outputs

  (carry, _), outputs = jax.lax.scan(control_step, (carry, start), inputs, unroll=unroll)
  shaped = jax.tree.map(lambda x: x.reshape((num_decisions, control_steps) + x.shape[1:]), outputs)
  ended, valid, taken, fires, record, command, episode_return, episode_length = shaped
  return carry, EndDecisionTrajectory(
    decision=ended,
    valid=valid,
    num_substeps=taken,
    intervened=fires,
    control=record,
    command=command,
    episode_return=episode_return,
    episode_length=episode_length,
  )


def _maybe_decide(
  policy_fn: PolicyFn, params: PyTree, obs: PyTree, key: Array, decision: _OpenDecision
) -> _OpenDecision:
  """Starts a new decision (the task policy's command at `obs`) in the environments without an
  open one; the policy runs only if some environment needs it (`lax.cond`)."""
  need = ~decision.open
  command, extras = jax.lax.cond(
    jnp.any(need), lambda: policy_fn(params, obs, key), lambda: (decision.command, decision.extras)
  )
  return _OpenDecision(
    open=jnp.ones_like(need),
    obs=_select_envs(need, obs, decision.obs),
    command=_select_envs(need, command, decision.command),
    extras=_select_envs(need, extras, decision.extras),
    reward=jnp.where(need, 0.0, decision.reward),
    taken=jnp.where(need, 0, decision.taken),
  )


# ----------------------------------------------------------------------------------------------
# What a two-rate rollout gives a replay buffer: decision transitions and control transitions.
# ----------------------------------------------------------------------------------------------
