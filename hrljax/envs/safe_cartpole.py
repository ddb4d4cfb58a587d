"""SafeCartPole: gymnax CartPole-v1 with a cost outside a cart-position band.

The dynamics, observation, reward and termination are gymnax's `CartPole` (reused by
subclassing, not re-implemented). On top:

- `info["cost"] = 1[|x'| >= cost_x_threshold]` (float32) and `info["violation"]` (bool), with
  x' the cart position after the step and `cost_x_threshold` (1.0) inside the termination bound
  `x_threshold` (2.4), so that an agent can violate and keep balancing;
- `terminate_on_violation` (default False: cost-limit / Lagrangian semantics);
- a continuous force (default): the action `a in [-1, 1]^1` applies the force
  `force_mag * clip(a, -1, 1)`, which is gymnax CartPole's `force_mag * (2b - 1)` with
  `b = (a + 1) / 2`, so the discrete dynamics are reused exactly; `action_type="discrete"` keeps
  CartPole's two actions (push left / right).

The reward is CartPole's upright bonus, +1 for every step the pole stays within +-12 degrees
and the cart within +-2.4. `info["discount"]` is `1 - terminated` (including violation
terminations).

Pattern from the ss2r SafeCartpole (`yardenas/safe-sim2real`,
`benchmark_suites/mujoco_playground/cartpole/cartpole.py`: cost = 1[|slider position| >= bound]
in `state.info["cost"]`). Deviation from it: gymnax's classic
CartPole dynamics instead of MuJoCo Playground's, and no cost on the pole.
"""

import chex
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces
from gymnax.environments.classic_control import cartpole

ACTION_TYPES = ("continuous", "discrete")

EnvState = cartpole.EnvState


@struct.dataclass
class EnvParams(cartpole.EnvParams):
  """CartPole-v1 parameters plus the position band and the violation semantics."""

  cost_x_threshold: float = 1.0
  terminate_on_violation: bool = False


def position_cost(x: chex.Array, params: EnvParams) -> chex.Array:
  """`1[|x| >= cost_x_threshold]` as float32, elementwise over cart positions `x`."""
  return (jnp.abs(x) >= params.cost_x_threshold).astype(jnp.float32)


class SafeCartPole(cartpole.CartPole):
  """CartPole-v1 with `info["cost"]` outside `|x| < cost_x_threshold`; gymnax 1.0 API.

  Args:
    action_type: "continuous" (default; a `[1]` action in [-1, 1] scales the force) or
      "discrete" (CartPole's actions 0 = push left, 1 = push right).
  """

  def __init__(self, action_type: str = "continuous"):
    if action_type not in ACTION_TYPES:
      raise ValueError(f"action_type: expected one of {ACTION_TYPES}, got {action_type!r}")
    super().__init__()
    self.action_type = action_type

  @property
  def default_params(self) -> EnvParams:
    return EnvParams()

  def step_env(
    self,
    key: chex.PRNGKey,
    state: EnvState,
    action: chex.Array,
    params: EnvParams,
  ) -> tuple[chex.Array, EnvState, chex.Array, chex.Array, dict[str, chex.Array]]:
    if self.action_type == "continuous":
      chex.assert_size(action, 1)
      force = jnp.clip(jnp.reshape(jnp.asarray(action, jnp.float32), ()), -1.0, 1.0)
      # CartPole applies force_mag * (2b - 1); b = (a + 1) / 2 turns that into force_mag * a.
      cartpole_action = 0.5 * (force + 1.0)
    else:
      chex.assert_rank(action, 0)
      cartpole_action = action
    obs, next_state, reward, terminated, _ = super().step_env(key, state, cartpole_action, params)
    # `terminated` already includes violations when they terminate: CartPole.step_env calls
    # self.is_terminal, which dispatches to the override below.
    cost = position_cost(next_state.x, params)
    info = {
      "discount": 1.0 - terminated.astype(jnp.float32),
      "cost": cost,
      "violation": cost > 0.0,
    }
    return obs, next_state, jnp.asarray(reward, jnp.float32), terminated, info

  def reset_env(self, key: chex.PRNGKey, params: EnvParams) -> tuple[chex.Array, EnvState]:
    obs, state = super().reset_env(key, params)
    # A strongly typed step counter keeps lax.scan carries stable across auto-resets.
    return obs, state.replace(time=jnp.zeros((), jnp.int32))

  def is_terminated(self, state: EnvState, params: EnvParams) -> jax.Array:
    """CartPole's termination, or a violation when `terminate_on_violation`."""
    violation = jnp.abs(state.x) >= params.cost_x_threshold
    return super().is_terminated(state, params) | (violation & params.terminate_on_violation)

  @property
  def name(self) -> str:
    return "SafeCartPole-v0"

  @property
  def num_actions(self) -> int:
    """Dimension of the continuous action, or the number of discrete actions."""
    return 1 if self.action_type == "continuous" else 2

  def action_space(self, params: EnvParams | None = None) -> spaces.Box | spaces.Discrete:
    if self.action_type == "continuous":
      return spaces.Box(low=-1.0, high=1.0, shape=(1,), dtype=jnp.float32)
    return spaces.Discrete(2)
