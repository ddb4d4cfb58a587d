"""Option-critic losses: intra-option Q targets, termination and intra-option policy gradients.

References:

- Bacon, Harb, Precup, "The Option-Critic Architecture", AAAI 2017, arXiv:1609.05140
  (Algorithm 1; Theorem 1, intra-option policy gradient; Theorem 2, termination gradient).
- Harb, Bacon, Klissarov, Precup, "When Waiting is not an Option: Learning Options with a
  Deliberation Cost", AAAI 2018, arXiv:1709.04571 (the deliberation cost xi).
- Sutton, Precup, Singh, "Between MDPs and semi-MDPs", Artificial Intelligence 1999
  (intra-option Q-learning and the value upon arrival U).
- Reference code: jeanharb/option_critic @5d6c81a (`neural_net.py`, `fourrooms/transfer.py`) and
  lweitkamp/option-critic-pytorch @fab40f7 (`option_critic.py`).

Quantities, for a set of O options:

- `Q(s, w)`: option value; `V(s)`: value over options, `sum_w pi(w|s) Q(s, w)`, or
  `max_w Q(s, w)` for a greedy / epsilon-greedy policy over options (what both reference codes use);
- `U(s', w) = (1 - beta_w(s')) Q(s', w) + beta_w(s') V(s')`: the value of arriving in s' while
  executing option w.

Index conventions follow rlax. One transition `s_tm1 -> s_t`: `q_tm1` holds values at the state
the option was executing in, `r_t`, `discount_t` and `q_t` belong to the state it arrived in, and
`option_tm1` is the option that generated the transition. Per-trajectory functions take `[T]`
arrays whose entry k describes transition k (from s_k to s_{k+1}); the `[T+1]`-long arrays of
`trajectory_termination_loss` hold s_0 .. s_T.

Terminated is not truncated. `discount_t = gamma * (1 - terminated_t)` folds termination in: a
terminal arrival state contributes no bootstrap. A truncated (time-limit) arrival keeps
`discount_t = gamma`, and its `q_t` / `beta_t` must be computed from the true final observation,
not from the reset observation that auto-resetting rollouts store; multi-step functions also stop
their window there (`truncated_t`) so a return never runs into the next episode.

Option and action indices. An index outside `[0, O)` (or `[0, A)` for an action), the sentinel
`O` of `sample_option` or a negative one included, is never read as another option's value (JAX
would clamp the gather, and wrap a negative index around): an eager call with concrete indices
raises a ValueError naming the argument, the range and the bad values; under jit (or vmap) the
example or step is invalid, its loss, target and extras are 0 and it enters no count or mean
(`select_option` returns the sentinel `O` for an unknown running option).

Losses are per-example or per-trajectory (each docstring says which); callers vmap over the batch.
"""

from typing import NamedTuple, Optional, Union

import chex
import distrax
import jax
import jax.numpy as jnp
import rlax

from hrljax.losses import _checks, _masking, policy_gradient

Array = chex.Array
Numeric = chex.Numeric

_LOSS_TYPES = ("l2", "huber")
_TERMINATION_STATES = ("next", "current")


class CriticExtras(NamedTuple):
  """Per-example quantities of `option_critic_loss`."""

  td_error: Array  # target - Q(s, w)
  target: Array


class TerminationExtras(NamedTuple):
  """Per-example quantities of `termination_loss`."""

  advantage: Array  # Q(s, w) - V(s), gradient stopped; xi is not included


class TrajectoryTerminationExtras(NamedTuple):
  """Per-step quantities of `trajectory_termination_loss`, plus its sum and denominator."""

  per_step_loss: Array  # [T], masked
  advantage: Array  # [T], Q - V at the chosen state, gradient stopped
  beta: Array  # [T], termination probability of the executing option at the chosen state
  mask: Array  # [T], 1 where the step counts
  loss_sum: Array  # scalar, sum of per_step_loss
  num_valid: Array  # scalar, sum of mask


class PolicyGradientExtras(NamedTuple):
  """Per-example quantities of `intra_option_pg_loss`."""

  advantage: Array  # target - baseline, gradient stopped (unless asked otherwise)
  log_prob: Array  # log pi_w(a | s)
  entropy: Array  # H(pi_w(. | s))


# ---------------------------------------------------------------------------------------------
# Helpers.


def _maybe_stop_gradient(x: Array, stop: bool) -> Array:
  return jax.lax.stop_gradient(x) if stop else x


def _index(name: str, index: Array, num: int) -> tuple[Array, Array]:
  """`(valid, clipped)`: where `index` lies in [0, num) (an eager call raises on an entry
  outside), and the index clipped into range, for a gather whose invalid entries are zeroed."""
  return _checks.ids_in_range(name, index, num), jnp.clip(index, 0, num - 1)


def _zero_invalid(valid: Array, *arrays) -> tuple[Array, ...]:
  """Each array (or Python scalar) with 0 where not `valid`, keeping its dtype."""
  return tuple(jnp.where(valid, x, 0) for x in arrays)


# ---------------------------------------------------------------------------------------------
# Policy over options and the value over options.


def value_over_options(q_s: Array, option_probs: Optional[Array] = None) -> Array:
  """Value over options `V(s) = sum_w pi(w|s) Q(s, w)`, or `max_w Q(s, w)` without `option_probs`.

  Per-example. Bacon et al. 2017 (arXiv:1609.05140), definition of V_Omega. Both reference codes
  use the max (greedy V) even where the behaviour policy is epsilon-greedy or softmax; pass the
  policy's probabilities for the on-policy expectation instead.

  Args:
    q_s: `[O]` float option values Q(s, .).
    option_probs: optional `[O]` float probabilities pi(. | s) of the policy over options.

  Returns:
    Scalar V(s). An option of probability 0 is not read: its value may be -inf (an impossible
    option) or anything else without changing V(s) or its gradient.
  """
  chex.assert_rank(q_s, 1)
  chex.assert_type(q_s, float)
  if option_probs is None:
    return jnp.max(q_s)
  chex.assert_rank(option_probs, 1)
  chex.assert_type(option_probs, float)
  chex.assert_equal_shape([q_s, option_probs])
  (q_s,) = _masking.zero_masked(option_probs, q_s)
  return jnp.sum(option_probs * q_s)


def epsilon_greedy_option_probs(q_s: Array, epsilon: Numeric) -> Array:
  """Probabilities of the epsilon-greedy policy over options.

  Per-example. `(1 - epsilon)` of the mass goes to the greedy options (split evenly between tied
  maxima, as `distrax.EpsilonGreedy` does) and `epsilon / O` to every option.
  Reference schedules: lweitkamp `eps = 0.1 + 0.9 exp(-t / 20000)` (test 0.05); jeanharb (Atari)
  linear 1.0 -> 0.1 over 1M steps (test 0.05).

  Args:
    q_s: `[O]` float option values Q(s, .).
    epsilon: exploration rate in [0, 1].

  Returns:
    `[O]` probabilities; all NaN if `q_s` has a NaN (the greedy option is then undefined, and
    the comparison with the maximum would silently read the NaN as "not greedy").
  """
  chex.assert_rank(q_s, 1)
  chex.assert_type(q_s, float)
  _checks.discount("epsilon", epsilon, arrays=True)
  probs = distrax.EpsilonGreedy(q_s, epsilon).probs
  return jnp.where(jnp.any(jnp.isnan(q_s)), jnp.asarray(jnp.nan, probs.dtype), probs)


def softmax_option_probs(q_s: Array, temperature: Numeric = 1.0) -> Array:
  """Probabilities of the softmax (Boltzmann) policy over options, `softmax(Q(s, .) / temperature)`.

  Per-example. The tabular four-rooms script of jeanharb/option_critic (`fourrooms/transfer.py`)
  uses this policy over options with temperature 1e-2 (its epsilon-greedy line is commented out).

  Args:
    q_s: `[O]` float option values Q(s, .).
    temperature: > 0.

  Returns:
    `[O]` probabilities.
  """
  chex.assert_rank(q_s, 1)
  chex.assert_type(q_s, float)
  _checks.positive("temperature", temperature, arrays=True)
  return jax.nn.softmax(q_s / temperature)


def _not_a_distribution(option_probs: Array) -> Array:
  """True if `option_probs` has a NaN or a negative entry, or no positive mass."""
  return jnp.any(jnp.isnan(option_probs)) | jnp.any(option_probs < 0) | ~jnp.any(option_probs > 0)


def sample_option(key: chex.PRNGKey, option_probs: Array) -> Array:
  """Draws one option index from `option_probs` (`[O]`). Per-example; returns an int32 scalar.

  An int cannot carry a NaN, so when `option_probs` is not a distribution (a NaN or negative
  entry, or all zero) the result is the out-of-range sentinel `O = option_probs.shape[0]`
  instead of an arbitrary valid index. `O` rather than -1: a negative index wraps around to the
  last option in NumPy and JAX indexing, whereas `O` makes NumPy raise and makes `jnp.take` /
  `jnp.take_along_axis` (default mode) return NaN, so the failure stays visible downstream. The
  functions of this module that take an option index raise on it when called eagerly and treat
  its example as invalid (0) under jit.
  """
  chex.assert_rank(option_probs, 1)
  chex.assert_type(option_probs, float)
  # Zero-probability options get -inf logits and are never drawn.
  option = jax.random.categorical(key, jnp.log(option_probs)).astype(jnp.int32)
  return jnp.where(_not_a_distribution(option_probs), jnp.int32(option_probs.shape[0]), option)


def select_option(
  key: chex.PRNGKey,
  option_tm1: Array,
  beta_t: Array,
  option_probs_t: Array,
  must_choose: Union[bool, Array] = False,
):
  """Call-and-return option execution: keep the running option unless it terminates.

  Per-example. The running option `option_tm1` terminates in the arrival state with probability
  `beta_t` (a Bernoulli draw); only then is a new option drawn from `option_probs_t` (which may
  draw the same option again). `must_choose=True` (e.g. at the first step of an episode) always
  draws a new option. Bacon et al. 2017, Algorithm 1.

  Args:
    key: PRNG key.
    option_tm1: int scalar, the option that was executing, in [0, O). Outside (e.g. the sentinel
      `O`), unless `must_choose`: the running option is unknown, so the result is `(O, True)`;
      an eager call (concrete `option_tm1` and `must_choose`) raises a ValueError naming it.
    beta_t: float scalar, its termination probability in the arrival state.
    option_probs_t: `[O]` probabilities of the policy over options in the arrival state.
    must_choose: bool scalar; if true the running option is ignored (and not checked).

  Returns:
    `(option_t, switched)`: the int32 option to execute next and a bool that is true when a new
    option was drawn. When the inputs that decide the result are not valid numbers, `option_t` is
    the out-of-range sentinel `O = option_probs_t.shape[0]` (see :func:`sample_option`): a NaN
    `beta_t` (unless `must_choose`: whether the option terminates is then unknown; `switched` is
    then True, since the running option is not kept), or a draw from `option_probs_t` that is
    not a distribution. A NaN in `option_probs_t` while the running option continues does not
    matter and gives the running option.
  """
  chex.assert_rank([option_tm1, beta_t, option_probs_t], [0, 0, 1])
  chex.assert_type([option_tm1, beta_t, option_probs_t], [int, float, float])
  num_options = option_probs_t.shape[0]
  # The running option is read only where a new one need not be drawn.
  known = _checks.ids_in_range("option_tm1", jnp.where(must_choose, 0, option_tm1), num_options)
  term_key, choice_key = jax.random.split(key)
  # A NaN probability would draw False (keep the option), silently; it counts as a switch to the
  # sentinel instead. So does an unknown running option.
  terminated = jax.random.bernoulli(term_key, beta_t) | jnp.isnan(beta_t) | ~known
  switched = jnp.logical_or(terminated, must_choose)
  new_option = sample_option(choice_key, option_probs_t)
  new_option = jnp.where(
    (jnp.isnan(beta_t) | ~known) & ~jnp.asarray(must_choose), jnp.int32(num_options), new_option
  )
  option_t = jnp.where(switched, new_option, jnp.asarray(option_tm1, jnp.int32))
  return option_t, switched


# ---------------------------------------------------------------------------------------------
# Critic: intra-option Q-learning.


def _value_on_switch(q_t: Array, q_t_selector: Optional[Array]) -> Array:
  """V(s') on termination: max of q_t, or q_t at the selector's argmax (double Q)."""
  if q_t_selector is None:
    return jnp.max(q_t, axis=-1)
  best = jnp.argmax(q_t_selector, axis=-1)
  return jnp.take_along_axis(q_t, best[..., None], axis=-1)[..., 0]


def intra_option_q_target(
  r_t: Numeric,
  discount_t: Numeric,
  q_t: Array,
  beta_t: Numeric,
  option_tm1: Numeric,
  q_t_selector: Optional[Array] = None,
  *,
  stop_target_gradients: bool = True,
) -> Array:
  """One-step intra-option Q-learning target of option-critic.

  Per-example (one transition). Bacon et al. 2017 (arXiv:1609.05140), Algorithm 1, critic step:

    G = r_t + discount_t * [(1 - beta_t) Q(s_t, w) + beta_t max_w' Q(s_t, w')],   w = option_tm1,

  i.e. `r + gamma U(s', w)` with a greedy V. With `q_t_selector` (online values at s_t) the
  switching term becomes `Q(s_t, argmax_w' q_t_selector[w'])` (double Q; jeanharb `double_q`).
  With beta_t = 1 this is the Q-learning target over options (`rlax.q_learning`); with beta_t = 0
  it bootstraps from the same option.

  Termination vs truncation: pass `discount_t = 0` for a terminal arrival state (q_t and beta_t
  are then ignored); for a time-limit truncation pass `discount_t = gamma` with q_t and beta_t
  evaluated on the true final observation.

  Reference-code notes: both references use a target ("prime") network for q_t and the online,
  detached termination head for beta_t; pass those. An early lweitkamp revision (0812d3e)
  multiplied only the continuing term by `(1 - done) * gamma` (operator precedence); this
  function discounts and masks the whole arrival value.

  Args:
    r_t: float scalar reward.
    discount_t: float scalar, gamma * (1 - terminated).
    q_t: `[O]` float option values at the arrival state (usually the target network).
    beta_t: float scalar, termination probability of `option_tm1` at the arrival state.
    option_tm1: int scalar, the option that generated the transition, in [0, O). Outside: an
      invalid example, target 0 (nothing of it is read; no gradient), and a ValueError naming
      `option_tm1` when it is concrete (an eager call).
    q_t_selector: optional `[O]` float online values at the arrival state (double Q).
    stop_target_gradients: stop gradients through the target (default True).

  Returns:
    Scalar target G.
  """
  chex.assert_rank([r_t, discount_t, q_t, beta_t, option_tm1], [0, 0, 1, 0, 0])
  chex.assert_type([r_t, discount_t, q_t, beta_t, option_tm1], [float, float, float, float, int])
  if q_t_selector is not None:
    chex.assert_rank(q_t_selector, 1)
    chex.assert_type(q_t_selector, float)
    chex.assert_equal_shape([q_t, q_t_selector])
  valid, option = _index("option_tm1", option_tm1, q_t.shape[0])
  r_t, discount_t, q_t, beta_t = _zero_invalid(valid, r_t, discount_t, q_t, beta_t)
  arrival_value = (1.0 - beta_t) * q_t[option] + beta_t * _value_on_switch(q_t, q_t_selector)
  target = jnp.asarray(r_t + discount_t * arrival_value)
  target = jnp.where(valid, target, jnp.zeros((), target.dtype))
  return _maybe_stop_gradient(target, stop_target_gradients)


def option_critic_loss(
  q_tm1: Array,
  option_tm1: Numeric,
  target_tm1: Numeric,
  *,
  loss_type: str = "l2",
  huber_delta: float = 1.0,
  stop_target_gradients: bool = True,
):
  """Critic regression of Q(s, w) onto an intra-option target.

  Per-example; callers vmap and reduce (lweitkamp averages over the replay batch, jeanharb sums).
  The target comes from `intra_option_q_target` (one step) or from
  `intra_option_n_step_targets` (n steps). Bacon et al. 2017, Algorithm 1 (critic step).

  Args:
    q_tm1: `[O]` float online option values at the state where the option was executing.
    option_tm1: int scalar, the executing option, in [0, O). Outside: an invalid example, loss
      and extras 0 (nothing of it is read; no gradient), and a ValueError naming `option_tm1`
      when it is concrete (an eager call).
    target_tm1: float scalar target.
    loss_type: "l2" for `0.5 td^2` (default; lweitkamp) or "huber" for `rlax.huber_loss(td,
      huber_delta)` (jeanharb, `clip_delta = 1`).
    huber_delta: Huber threshold (> 0), used only with "huber".
    stop_target_gradients: stop gradients through the target (default True).

  Returns:
    `(loss, CriticExtras(td_error, target))`, loss a scalar.
  """
  _checks.choice("loss_type", loss_type, _LOSS_TYPES)
  _checks.positive("huber_delta", huber_delta, arrays=True)
  chex.assert_rank([q_tm1, option_tm1, target_tm1], [1, 0, 0])
  chex.assert_type([q_tm1, option_tm1, target_tm1], [float, int, float])
  valid, option = _index("option_tm1", option_tm1, q_tm1.shape[0])
  target_tm1 = _maybe_stop_gradient(jnp.asarray(target_tm1), stop_target_gradients)
  q_option, target_tm1 = _zero_invalid(valid, q_tm1[option], target_tm1)
  td_error = target_tm1 - q_option
  if loss_type == "l2":
    loss = 0.5 * jnp.square(td_error)
  else:
    loss = rlax.huber_loss(td_error, huber_delta)
  return loss, CriticExtras(td_error=td_error, target=target_tm1)


# ---------------------------------------------------------------------------------------------
# Option-aware multi-step returns.


def option_segment_ends(
  option_end_t: Array, n: int, *, episode_end_t: Optional[Array] = None
) -> Array:
  """Index of the last transition of the option-aware window that starts at each step.

  Per-trajectory. The window starting at transition t runs until the option ends
  (`option_end_t[k]`), the episode ends (`episode_end_t[k]`, terminated or truncated), n
  transitions have passed, or the trajectory ends, whichever comes first:

    end[t] = min(first k >= t with option_end[k] or episode_end[k], t + n - 1, T - 1).

  The window's terminal state is s_{end[t] + 1}. This is the index arithmetic shared by
  `option_aware_n_step_returns` and by OTA's option-terminal index (Ahn et al. 2025,
  arXiv:2505.12737): with `option_end_t[k] = (k + 1 == goal_index)` over a trajectory whose last
  state is `traj_end = T`, `end[i] + 1 = min(i + n, goal_index, traj_end)` for goals after i. A
  window always holds at least one transition.

  Args:
    option_end_t: `[T]` bool/int/float flags; nonzero if the option running during transition k
      ended on arrival in s_{k+1}.
    n: maximum window length, a Python int >= 1.
    episode_end_t: optional `[T]` flags; nonzero if s_{k+1} ended the episode.

  Returns:
    `[T]` int32 end indices.
  """
  _checks.integer("n", n)
  chex.assert_rank(option_end_t, 1)
  stops = option_end_t.astype(bool)
  if episode_end_t is not None:
    chex.assert_rank(episode_end_t, 1)
    chex.assert_equal_shape([option_end_t, episode_end_t])
    stops = jnp.logical_or(stops, episode_end_t.astype(bool))
  num_steps = option_end_t.shape[0]
  steps = jnp.arange(num_steps, dtype=jnp.int32)
  stop_index = jnp.where(stops, steps, num_steps - 1)
  next_stop = jax.lax.cummin(stop_index, axis=0, reverse=True)
  return jnp.minimum(next_stop, steps + (n - 1))


def option_aware_n_step_returns(
  r_t: Array,
  discount_t: Array,
  bootstrap_t: Array,
  option_end_t: Array,
  n: int,
  *,
  truncated_t: Optional[Array] = None,
  beta_t: Optional[Array] = None,
  v_t: Optional[Array] = None,
  stop_target_gradients: bool = True,
) -> Array:
  """n-step returns that stop at option boundaries.

  Per-trajectory (`[T]` inputs; entry k describes the transition s_k -> s_{k+1}). The return from
  step t accumulates discounted rewards until the option ends (`option_end_t`), n transitions
  pass, the episode ends, or the trajectory ends; it then bootstraps from `bootstrap_t` at the
  window's last transition. Plain form (no `beta_t`):

    G_k = r_k + discount_k * [c_k G_{k+1} + (1 - c_k) bootstrap_k],

  where c_k = 1 while the window started at t continues past transition k. Termination is folded
  into `discount_t` (0 at a terminal arrival, which also drops everything after it); a truncated
  step (`truncated_t`) ends the window and bootstraps from `bootstrap_t` there, which must then
  hold the value of the true final observation.

  Expected-termination form (pass `beta_t` and `v_t`, the option's termination probability and
  the value over options at s_{k+1}): the arrival value is mixed at every step,

    G_k = r_k + discount_k * [beta_k v_k + (1 - beta_k)(c_k G_{k+1} + (1 - c_k) bootstrap_k)],

  so that with `bootstrap_t = Q(s_{k+1}, w)` the window ends in the arrival value U(s_{k+1}, w)
  and n = 1 gives the one-step intra-option target. Continuing with weight (1 - beta_k) is valid
  only while the same option keeps acting, which is why the window stops at option ends [inferred:
  an hrljax extension of Bacon et al. 2017 in the spirit of tree backup; the references are
  one-step].

  OTA (Ahn et al. 2025) reuses the window arithmetic through `option_segment_ends`; its target
  (one reward and one gamma per option) is built in `hrljax.losses.goal_conditioned`.

  Args:
    r_t: `[T]` float rewards.
    discount_t: `[T]` float discounts, gamma * (1 - terminated).
    bootstrap_t: `[T]` float value to fall back on when the window stops after transition k.
    option_end_t: `[T]` flags; nonzero if the option ended on arrival in s_{k+1} (a sampled
      termination or a change of option).
    n: maximum number of transitions per window, a Python int >= 1.
    truncated_t: optional `[T]` flags; nonzero if s_{k+1} is a time-limit truncation.
    beta_t: optional `[T]` float termination probabilities (expected-termination form).
    v_t: optional `[T]` float values over options at s_{k+1} (with `beta_t`).
    stop_target_gradients: stop gradients through the returns (default True).

  Returns:
    `[T]` float returns.
  """
  _checks.integer("n", n)
  if (beta_t is None) != (v_t is None):
    raise ValueError(
      "beta_t, v_t: expected both (expected-termination form) or neither (plain form), got "
      f"beta_t={'set' if beta_t is not None else None}, v_t={'set' if v_t is not None else None}"
    )
  chex.assert_rank([r_t, discount_t, bootstrap_t, option_end_t], 1)
  chex.assert_type([r_t, discount_t, bootstrap_t], float)
  chex.assert_equal_shape([r_t, discount_t, bootstrap_t, option_end_t])
  optional = [x for x in (truncated_t, beta_t, v_t) if x is not None]
  if optional:
    chex.assert_rank(optional, 1)
    chex.assert_equal_shape([r_t] + optional)
  if beta_t is not None:
    chex.assert_type([beta_t, v_t], float)

  num_steps = r_t.shape[0]
  continues = jnp.logical_not(option_end_t.astype(bool))
  if truncated_t is not None:
    continues = jnp.logical_and(continues, jnp.logical_not(truncated_t.astype(bool)))
  continues = continues.at[-1].set(False)  # the trajectory ends: bootstrap at the last step

  def backup(continuation):
    arrival = continuation if beta_t is None else beta_t * v_t + (1.0 - beta_t) * continuation
    return r_t + discount_t * arrival

  def extend_window(_, returns):
    next_returns = jnp.concatenate([returns[1:], jnp.zeros_like(returns[:1])])
    return backup(jnp.where(continues, next_returns, bootstrap_t))

  # Iteration m holds the returns of windows at most m transitions long.
  returns = backup(bootstrap_t)
  returns = jax.lax.fori_loop(0, min(n, num_steps) - 1, extend_window, returns)
  return _maybe_stop_gradient(returns, stop_target_gradients)


def intra_option_n_step_targets(
  r_t: Array,
  discount_t: Array,
  q_t: Array,
  beta_t: Array,
  option_tm1: Array,
  option_end_t: Array,
  n: int,
  *,
  truncated_t: Optional[Array] = None,
  q_t_selector: Optional[Array] = None,
  stop_target_gradients: bool = True,
) -> Array:
  """n-step option-critic targets for every step of a trajectory.

  Per-trajectory. The expected-termination form of `option_aware_n_step_returns` with
  `bootstrap_k = Q(s_{k+1}, w_k)` and `v_k = max_w' Q(s_{k+1}, w')` (or the double-Q value):

    G_k = r_k + discount_k [beta_k V(s_{k+1}) + (1 - beta_k) (G_{k+1} if the window continues
                                                             else Q(s_{k+1}, w_k))].

  For n = 1 this equals `intra_option_q_target` at every step. A window ends where `option_end_t`
  is set, where `option_tm1` changes between consecutive steps, at a truncation, at a terminal
  state (discount 0), after n transitions, or at the end of the trajectory. [inferred: the paper
  and both reference codes use the one-step target only.]

  Args:
    r_t: `[T]` float rewards.
    discount_t: `[T]` float, gamma * (1 - terminated).
    q_t: `[T, O]` float option values at s_{k+1} (usually the target network; true final
      observation at truncations).
    beta_t: `[T]` float, termination probability of `option_tm1[k]` at s_{k+1}.
    option_tm1: `[T]` int, the option that generated transition k, in [0, O). A step outside is
      invalid: its target is 0, nothing of it is read, and the windows of the steps around it
      stop before it (the results elsewhere are those of the trajectory split there); an eager
      call with a concrete `option_tm1` raises a ValueError naming it instead.
    option_end_t: `[T]` flags; nonzero if that option was terminated on arrival in s_{k+1}.
    n: maximum window length, Python int >= 1.
    truncated_t: optional `[T]` truncation flags.
    q_t_selector: optional `[T, O]` float online values at s_{k+1} (double Q).
    stop_target_gradients: stop gradients through the targets (default True).

  Returns:
    `[T]` float targets.
  """
  _checks.integer("n", n)
  chex.assert_rank([r_t, discount_t, q_t, beta_t, option_tm1, option_end_t], [1, 1, 2, 1, 1, 1])
  chex.assert_type([q_t, option_tm1], [float, int])
  chex.assert_equal_shape([r_t, discount_t, beta_t, option_tm1, option_end_t])
  chex.assert_equal_shape_prefix([q_t, r_t], 1)
  if q_t_selector is not None:
    chex.assert_rank(q_t_selector, 2)
    chex.assert_type(q_t_selector, float)
    chex.assert_equal_shape([q_t, q_t_selector])
  valid, option = _index("option_tm1", option_tm1, q_t.shape[-1])
  r_t, discount_t, beta_t = _zero_invalid(valid, r_t, discount_t, beta_t)
  (q_t,) = _zero_invalid(valid[:, None], q_t)
  q_continue = jnp.take_along_axis(q_t, option[:, None], axis=1)[:, 0]
  v_switch = _value_on_switch(q_t, q_t_selector)
  # A window also stops before an invalid step (whose raw index differs from a valid one's).
  option_changes = jnp.concatenate([option_tm1[1:] != option_tm1[:-1], jnp.zeros((1,), dtype=bool)])
  window_ends = jnp.logical_or(option_end_t.astype(bool), option_changes)
  targets = option_aware_n_step_returns(
    r_t,
    discount_t,
    q_continue,
    window_ends,
    n,
    truncated_t=truncated_t,
    beta_t=beta_t,
    v_t=v_switch,
    stop_target_gradients=stop_target_gradients,
  )
  return jnp.where(valid, targets, jnp.zeros((), targets.dtype))


# ---------------------------------------------------------------------------------------------
# Actor: termination gradient and intra-option policy gradient.


def termination_loss(beta: Array, q_option: Numeric, v: Numeric, xi: Numeric, mask: Numeric = 1.0):
  """Termination loss with deliberation cost, `beta * stop_gradient(Q(s, w) - V(s) + xi) * mask`.

  Per-example. Minimising it follows the termination gradient theorem (Bacon et al. 2017,
  Theorem 2, `-dbeta/dtheta (A(s', w) + xi)`): beta grows where the option is worse than the
  policy over options and shrinks where it is better; xi >= 0 (termination regulariser of Bacon et
  al.; deliberation cost of Harb et al. 2018, arXiv:1709.04571) pushes every beta down so options
  last longer. Only beta receives gradient.

  Which state to pass: the paper evaluates beta and A at the arrival state s_{t+1} of the
  executing option w, masked by `1 - terminated` (no decision at a terminal state). Both reference
  codes evaluate them at the current state s_t and reuse Q(s_t) (jeanharb `neural_net.py`,
  lweitkamp issue #1, still open); lweitkamp masks by `1 - done`, jeanharb does not mask.
  lweitkamp's unmerged `updated_oc` branch (6546611, `src/loss.py`) moved to s_{t+1}, with
  target-network Q values and the `1 - done` mask.
  `trajectory_termination_loss` picks either from `[T+1]` arrays with `state_for_termination`.
  Reference values: xi = 0 (jeanharb `TERMINATION_REG`), 0.01 (lweitkamp `--termination-reg`).

  Args:
    beta: float scalar, beta_w at the chosen state (carries the gradient).
    q_option: float scalar, Q(., w) at the same state.
    v: float scalar, V at the same state (`value_over_options`).
    xi: deliberation cost, >= 0.
    mask: float scalar, 0 to drop the example (its beta, Q and V are then not read: loss,
      advantage and gradient 0, whatever they hold).

  Returns:
    `(loss, TerminationExtras(advantage))`, loss a scalar.
  """
  _checks.nonnegative("xi", xi, arrays=True)
  chex.assert_rank([beta, q_option, v, mask], 0)
  chex.assert_type([beta, q_option, v], float)
  beta, q_option, v = _masking.zero_masked(mask, *map(jnp.asarray, (beta, q_option, v)))
  advantage = jax.lax.stop_gradient(jnp.asarray(q_option) - v)
  loss = jnp.asarray(beta) * (advantage + xi) * mask
  return loss, TerminationExtras(advantage=advantage)


def trajectory_termination_loss(
  beta: Array,
  q: Array,
  option_tm1: Array,
  terminated_t: Array,
  truncated_t: Array,
  xi: Numeric,
  *,
  v: Optional[Array] = None,
  state_for_termination: str = "next",
):
  """Termination loss over a trajectory, evaluated at s_{t+1} (paper) or s_t (reference codes).

  Per-trajectory. `beta`, `q` (and `v`) hold s_0 .. s_T; transition k executes `option_tm1[k]`
  from s_k to s_{k+1}. Each step contributes `termination_loss` for option w_k at

  - `state_for_termination="next"` (default; Bacon et al. 2017, Theorem 2 and Algorithm 1):
    s_{k+1}, skipped when transition k ended the episode (terminated: no decision is taken at a
    terminal state; truncated: with auto-reset, index k+1 holds the next episode's first state);
  - `state_for_termination="current"` (reference-code parity, jeanharb `neural_net.py` and
    lweitkamp `option_critic.py`): s_k, skipped on the same episode-ending transitions, which
    reproduces lweitkamp's `(1 - done)` mask; jeanharb does not mask (pass all-false flags).

  The loss is the mean over counted steps (`loss_sum / max(num_valid, 1)`); for a global-batch
  mean, sum `loss_sum` and `num_valid` over the batch instead. The state a skipped step would
  look at is not read (its beta, q and v may hold anything; its extras are 0).

  Args:
    beta: `[T+1, O]` float termination probabilities of every option (carries the gradient).
    q: `[T+1, O]` float option values (online network in the references).
    option_tm1: `[T]` int, option executed during transition k, in [0, O). A step outside is
      skipped like an episode end (mask 0, extras 0, not in `num_valid`); an eager call with a
      concrete `option_tm1` raises a ValueError naming it instead.
    terminated_t: `[T]` flags, s_{k+1} is terminal.
    truncated_t: `[T]` flags, s_{k+1} is a time-limit truncation.
    xi: deliberation cost, >= 0.
    v: optional `[T+1]` float values over options; default `max_w q`.
    state_for_termination: "next" or "current".

  Returns:
    `(loss, TrajectoryTerminationExtras)`.
  """
  _checks.choice("state_for_termination", state_for_termination, _TERMINATION_STATES)
  _checks.nonnegative("xi", xi, arrays=True)
  chex.assert_rank([beta, q, option_tm1, terminated_t, truncated_t], [2, 2, 1, 1, 1])
  chex.assert_type([beta, q, option_tm1], [float, float, int])
  chex.assert_equal_shape([beta, q])
  chex.assert_equal_shape([option_tm1, terminated_t, truncated_t])
  num_steps = option_tm1.shape[0]
  if beta.shape[0] != num_steps + 1:
    raise AssertionError(
      f"beta, q: expected {num_steps + 1} states for {num_steps} transitions, got {beta.shape[0]}"
    )
  if v is None:
    v = jnp.max(q, axis=-1)
  chex.assert_shape(v, (num_steps + 1,))
  chex.assert_type(v, float)

  valid, option = _index("option_tm1", option_tm1, beta.shape[1])
  offset = 1 if state_for_termination == "next" else 0
  states = jnp.arange(num_steps) + offset
  beta_w = beta[states, option]
  q_w = q[states, option]
  ended = jnp.logical_or(terminated_t.astype(bool), truncated_t.astype(bool))
  mask = jnp.logical_and(jnp.logical_not(ended), valid).astype(beta.dtype)
  beta_w, q_w, v_w = _masking.zero_masked(mask, beta_w, q_w, v[states])
  per_step_loss, extras = jax.vmap(termination_loss, in_axes=(0, 0, 0, None, 0))(
    beta_w, q_w, v_w, xi, mask
  )
  loss_sum = jnp.sum(per_step_loss)
  num_valid = jnp.sum(mask)
  loss = loss_sum / jnp.maximum(num_valid, 1.0)
  return loss, TrajectoryTerminationExtras(
    per_step_loss=per_step_loss,
    advantage=extras.advantage,
    beta=beta_w,
    mask=mask,
    loss_sum=loss_sum,
    num_valid=num_valid,
  )


def intra_option_pg_loss(
  logits_tm1: Array,
  a_tm1: Numeric,
  target_tm1: Numeric,
  baseline_tm1: Numeric,
  entropy_coef: Numeric = 0.0,
  *,
  stop_target_gradients: bool = True,
):
  """Intra-option policy-gradient loss with entropy regularisation.

  Per-example:

    L = -log pi_w(a | s) * stop_gradient(G - baseline) - entropy_coef * H(pi_w(. | s)).

  Bacon et al. 2017, Theorem 1 (intra-option policy gradient), with the one-step target G
  standing in for Q_U(s, w, a) as in both reference codes and Q(s, w) as the baseline (lweitkamp
  always; jeanharb with `--baseline`; pass `baseline_tm1=0.0` for jeanharb's default `-log pi G`).
  Entropy coefficients: lweitkamp 0.01, jeanharb 0.0. The update is online, on the current
  transition. log pi uses `jax.nn.log_softmax` (not `rlax.softmax`, which warns); apply any
  temperature to the logits beforehand (the references use `softmax(logits / temperature)`).
  A masked action (a -inf logit) adds nothing to the entropy and gets a zero gradient.

  Args:
    logits_tm1: `[A]` float action logits of the executing option's policy (-inf for an action
      the option cannot take; the taken action's logit must be finite).
    a_tm1: int scalar, the action taken, in [0, A). Outside: an invalid example, loss and
      extras 0 (nothing of it is read; no gradient), and a ValueError naming `a_tm1` when it is
      concrete (an eager call).
    target_tm1: float scalar target G.
    baseline_tm1: float scalar baseline, usually Q(s, w).
    entropy_coef: >= 0.
    stop_target_gradients: stop gradients through `G - baseline` (default True; lweitkamp issue
      #2 is harmless for this reason).

  Returns:
    `(loss, PolicyGradientExtras(advantage, log_prob, entropy))`.
  """
  _checks.nonnegative("entropy_coef", entropy_coef, arrays=True)
  chex.assert_rank([logits_tm1, a_tm1, target_tm1, baseline_tm1], [1, 0, 0, 0])
  chex.assert_type([logits_tm1, a_tm1, target_tm1, baseline_tm1], [float, int, float, float])
  valid, action = _index("a_tm1", a_tm1, logits_tm1.shape[0])
  logits_tm1, target_tm1, baseline_tm1 = _zero_invalid(valid, logits_tm1, target_tm1, baseline_tm1)
  log_prob = jax.nn.log_softmax(logits_tm1)[action]
  entropy = policy_gradient.categorical_entropy(logits_tm1)
  advantage = _maybe_stop_gradient(jnp.asarray(target_tm1 - baseline_tm1), stop_target_gradients)
  loss = -log_prob * advantage - entropy_coef * entropy
  loss, log_prob, entropy = _zero_invalid(valid, loss, log_prob, entropy)
  return loss, PolicyGradientExtras(advantage=advantage, log_prob=log_prob, entropy=entropy)
