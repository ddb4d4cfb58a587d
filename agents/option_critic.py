"""Batched advantage option-critic (A2OC) with n-step option-aware targets and a deliberation cost.

Papers:
  * Bacon, Harb, Precup, "The Option-Critic Architecture", AAAI 2017, arXiv:1609.05140
    (Algorithm 1; Theorem 1, intra-option policy gradient; Theorem 2, termination gradient;
    four-rooms experiment).
  * Harb, Bacon, Klissarov, Precup, "When Waiting is Not an Option: Learning Options with a
    Deliberation Cost", AAAI 2018, arXiv:1709.04571 (A2OC: many environments, n-step returns,
    deliberation cost c and margin).

Reference code read for formulas: jeanharb/option_critic @099763b (`fourrooms/transfer.py`, the
tabular four-rooms agent and its hyperparameters) and jeanharb/a2oc_delib @3def772
(`OC_theano.py`: A2OC's losses).

One update = every environment acts for `num_steps` steps, then one gradient step on

  L = critic_coef * L_critic + L_intra_option_pg + L_termination,

all built from `hrljax.losses.options`:
  * critic: `options.option_critic_loss` of Q(s_k, w_k) onto the option-aware n-step target
    (`option_aware_n_step_returns`, expected-termination form): windows of at most `n_step`
    transitions that stop where the option ends, at a terminal state or truncation, or at the end
    of the rollout, bootstrapping from the arrival value U_c(s', w) = (1 - beta_w(s')) Q(s', w) +
    beta_w(s') (V(s') - c);
  * intra-option policy: `intra_option_pg_loss` with the same target and Q(s_k, w_k) as baseline;
  * termination: `trajectory_termination_loss` with xi = c + margin, at s_{k+1} (paper) by default.
Targets come from the online network under stop-gradient (A2OC has no target network).

The option running in each environment is part of the rollout state (`OptionEnvCarry.option` of
`hrljax.rollout.call_and_return`, -1 when an episode has just started and an option must be
chosen), so it survives from one update to the next and is reset at episode ends. Call-and-return
execution: the running option ends in the arrival state with probability beta_w(s'), then the
policy over options (epsilon-greedy over Q by default) draws the next one.

Deviations from the paper's four-rooms setting, each a config field (why, with the runs behind
each choice: docs/options.md). Kept: 4 options, gamma 0.99, epsilon 0.01, zero-initialised
tabular parameters, the intra-option Q-learning critic, the Q baseline.
  * step sizes: Adam on the batch mean at 0.01 / 0.005 / 0.005 (the paper's 2:1:1 ratio), not the
    reference's per-transition tabular SGD 0.5 / 0.25 / 0.25, which diverges once updates are
    batched (`optimizer="sgd", loss_reduction="sum"` reproduces that per-transition step).
  * xi = 0.01 (`termination_margin`, Bacon et al.'s termination regulariser; the script's 0 lets
    options shrink to one step).
  * intra-option temperature 1 (script 1e-2, paper text 1e-3).
  * the deliberation cost enters the arrival value in expectation, beta (V - c), Harb et al.'s
    cost-augmented value (A2OC's code charges -c as a reward on a switch); c = 0 by default.
  * n-step windows stop at option ends (A2OC's run through switches).
  * V(s) is `max_w Q(s, w)` (paper) or the epsilon-greedy expectation (`value_over_options=
    "expected"`, A2OC); termination at s_{k+1} (paper) or s_k (`state_for_termination=
    "current"`, both codes); one rate per part (A2OC: one RMSProp, `optimizer="rmsprop"`).
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, training
from hrljax.agents import common
from hrljax.envs import four_rooms
from hrljax.losses import options
from hrljax.networks.option_critic import OptionCriticNetwork, OptionCriticOutput, param_labels
from hrljax.rollout import call_and_return, rollout_statistics
from hrljax.rollout.call_and_return import NO_OPTION, OptionEnvCarry, OptionExtras
from hrljax.training import Learner
from hrljax.types import Array, PyTree, Transition


OPTIMIZERS = ("sgd", "rmsprop", "adam")
OPTION_POLICIES = ("epsilon_greedy", "softmax")
VALUES_OVER_OPTIONS = ("max", "expected")
LOSS_REDUCTIONS = ("mean", "sum")


def get_config() -> ml_collections.ConfigDict:
  """Option-critic on four rooms with the paper's settings, batched as in A2OC."""
  config = training.run_config(log_every=50, checkpoint_every=500)
  config.agent = "option_critic"
  config.env_name = four_rooms.ENV_NAME
  config.env_kwargs = ml_collections.ConfigDict({"observation": "one_hot"})
  config.total_timesteps = 1_000_000
  config.num_envs = 16
  config.num_steps = 8  # rollout length per update
  config.n_step = 8  # longest option-aware return window (<= num_steps is useful)
  config.num_options = 4  # paper, four rooms
  config.gamma = 0.99  # paper
  # Not the reference's tabular SGD rates 0.5 / 0.25 / 0.25 (see the module docstring).
  config.optimizer = "adam"
  config.critic_learning_rate = 0.01
  config.intra_option_learning_rate = 0.005
  config.termination_learning_rate = 0.005
  config.loss_reduction = "mean"  # A2OC's
  config.max_grad_norm = 0.0  # 0 disables clipping (A2OC: 40, global norm)
  config.critic_coef = 1.0
  config.critic_loss = "l2"  # or "huber"
  config.entropy_coef = 0.0  # jeanharb 0; A2OC 0.01
  config.baseline = True  # Q(s, w) as the intra-option baseline (the command's --baseline)
  config.option_policy = "epsilon_greedy"
  config.option_epsilon = 0.01  # the command's --epsilon
  config.option_temperature = 0.01  # used by option_policy="softmax"
  config.temperature = 1.0  # intra-option softmax temperature (tabular code 1e-2, paper 1e-3)
  config.value_over_options = "max"
  config.deliberation_cost = 0.0  # c (Harb et al.); four rooms: none
  config.termination_margin = 0.01  # xi of Bacon et al. (four-rooms script: 0); loss uses c + xi
  config.state_for_termination = "next"
  config.hidden_sizes = ()  # linear heads on one-hot cells = the paper's tabular agent
  config.activation = "relu"
  config.head_init_scale = 0.0  # paper: weights initialised to zero
  config.head_bias = False  # tabular: no parameter shared between cells
  config.rollout_unroll = 4
  config.eval_option_epsilon = 0.01
  # The goal moves after this many environment steps (summed over environments); 0: never.
  config.transfer_after = 0
  config.env_kwargs.transfer_after_steps = config.get_ref("transfer_after") // config.get_ref(
    "num_envs"
  )
  config.env_kwargs.transfer_seed = 0  # seed of the moved goal's draw (part of the task)
  config.eval_episodes = 32
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_envs",
    "num_steps",
    "n_step",
    "num_options",
    "eval_episodes",
    "rollout_unroll",
  )
  checks.positive(
    config,
    "critic_learning_rate",
    "intra_option_learning_rate",
    "termination_learning_rate",
    "temperature",
    "option_temperature",
  )
  checks.non_negative(
    config,
    "max_grad_norm",
    "critic_coef",
    "entropy_coef",
    "deliberation_cost",
    "termination_margin",
    "transfer_after",
  )
  checks.in_unit_interval(config, "gamma", "option_epsilon", "eval_option_epsilon")
  checks.one_of(config, "optimizer", OPTIMIZERS)
  checks.one_of(config, "option_policy", OPTION_POLICIES)
  checks.one_of(config, "value_over_options", VALUES_OVER_OPTIONS)
  checks.one_of(config, "loss_reduction", LOSS_REDUCTIONS)
  checks.one_of(config, "critic_loss", ("l2", "huber"))
  checks.one_of(config, "state_for_termination", ("next", "current"))
  checks.one_of(config, "baseline", (True, False))
  checks.one_of(config, "head_bias", (True, False))
  sizes = tuple(config.hidden_sizes)
  if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
    raise checks.ConfigError(
      f"config.hidden_sizes: expected a tuple of integers > 0, got {config.hidden_sizes!r}"
    )
  if isinstance(config.transfer_after, bool) or not isinstance(config.transfer_after, int):
    raise checks.ConfigError(
      f"config.transfer_after: expected an integer >= 0, got {config.transfer_after!r}"
    )
  checks.divisible(config, "num_envs", num_devices, "the device count")
  checks.at_least(
    config,
    "total_timesteps",
    config.num_envs * config.num_steps,
    "one update of num_envs * num_steps",
  )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)  # unknown names fail here
  if not envs.spec(env, env_params).discrete:
    raise checks.ConfigError(
      f"config.env_name: expected an environment with discrete actions, got {config.env_name!r}"
    )


# ----------------------------------------------------------------------------------------------
# Acting: the policy over options and the intra-option policies, executed call-and-return by
# `hrljax.rollout.call_and_return`.
# ----------------------------------------------------------------------------------------------


def option_probabilities(q: Array, policy: str, epsilon, temperature) -> Array:
  """Policy over options for a batch `[N, O]` of option values."""
  if policy == "softmax":
    return jax.vmap(options.softmax_option_probs, in_axes=(0, None))(q, temperature)
  return jax.vmap(options.epsilon_greedy_option_probs, in_axes=(0, None))(q, epsilon)


def state_value(q: Array, kind: str, epsilon) -> Array:
  """V(s) for `[..., O]` option values: the max, or the epsilon-greedy expectation (A2OC)."""
  if kind == "expected":
    return (1.0 - epsilon) * jnp.max(q, axis=-1) + epsilon * jnp.mean(q, axis=-1)
  return jnp.max(q, axis=-1)


def select_options_and_actions(
  out: OptionCriticOutput, option_tm1: Array, key: Array, config, epsilon
) -> tuple[Array, OptionExtras]:
  """Terminates or keeps each environment's option, then samples an action from it."""
  num_envs = option_tm1.shape[0]
  select_key, action_key = jax.random.split(key)
  probs = option_probabilities(out.q, config.option_policy, epsilon, config.option_temperature)
  must_choose = option_tm1 == NO_OPTION
  running = jnp.maximum(option_tm1, 0)
  beta_running = jnp.take_along_axis(out.beta, running[:, None], axis=1)[:, 0]
  option, switched = jax.vmap(options.select_option)(
    jax.random.split(select_key, num_envs), running, beta_running, probs, must_choose
  )
  logits = jnp.take_along_axis(out.logits, option[:, None, None], axis=1)[:, 0]
  action = jax.vmap(jax.random.categorical)(jax.random.split(action_key, num_envs), logits)
  extras = OptionExtras(
    option=option,
    switched=switched,
    terminated_option=jnp.logical_and(switched, jnp.logical_not(must_choose)),
  )
  return action.astype(jnp.int32), extras


def option_policy(network: nn.Module, config, epsilon) -> call_and_return.OptionPolicyFn:
  """The acting policy of `call_and_return.rollout` / `evaluate`: the network's outputs at the
  observations, then `select_options_and_actions` with `epsilon` over options."""

  def policy(params, obs, option_tm1, key):
    out = network.apply(params, obs)
    return select_options_and_actions(out, option_tm1, key, config, epsilon)

  return policy


# ----------------------------------------------------------------------------------------------
# The agent: losses and update.
# ----------------------------------------------------------------------------------------------


class TrajectoryLosses(NamedTuple):
  """Per-environment (one `[T]` trajectory) loss terms and what explains them."""

  critic: Array  # [T]
  policy: Array  # [T]
  termination_sum: Array  # scalar
  termination_count: Array  # scalar
  target: Array  # [T]
  td_error: Array  # [T]
  entropy: Array  # [T]
  beta: Array  # [T], termination probability used by the termination loss
  advantage: Array  # [T], Q - V used by the termination loss


def trajectory_losses(
  out: OptionCriticOutput, out_next: OptionCriticOutput, traj: Transition, config
) -> TrajectoryLosses:
  """All option-critic loss terms for one environment's `[T]` slice of a rollout."""
  extras: OptionExtras = traj.policy_extras
  option = extras.option
  stop = jax.lax.stop_gradient
  epsilon, cost = config.option_epsilon, config.deliberation_cost
  discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))

  # Arrival quantities of the executing option, from the online network without gradient.
  q_next = stop(out_next.q)
  take = lambda x: jnp.take_along_axis(x, option[:, None], axis=1)[:, 0]
  beta_next = take(stop(out_next.beta))
  v_next = state_value(q_next, config.value_over_options, epsilon) - cost
  # The option of transition k ended on arrival in s_{k+1} iff a new one was drawn there.
  option_end = jnp.concatenate([extras.switched[1:], jnp.zeros((1,), bool)])
  targets = options.option_aware_n_step_returns(
    traj.reward,
    discount,
    take(q_next),
    option_end,
    config.n_step,
    truncated_t=traj.truncated,
    beta_t=beta_next,
    v_t=v_next,
  )

  critic, critic_extras = jax.vmap(
    lambda q, w, g: options.option_critic_loss(q, w, g, loss_type=config.critic_loss)
  )(out.q, option, targets)
  logits = jnp.take_along_axis(out.logits, option[:, None, None], axis=1)[:, 0]
  baseline = take(stop(out.q)) if config.baseline else jnp.zeros_like(targets)
  policy, pg_extras = jax.vmap(options.intra_option_pg_loss, in_axes=(0, 0, 0, 0, None))(
    logits, traj.action, targets, baseline, config.entropy_coef
  )

  # [T+1] states s_0 .. s_T for the termination loss: "next" reads s_{k+1} (the true successor,
  # next_obs[k]) and "current" reads s_k (obs[k]); the unused end is filled with a real state.
  if config.state_for_termination == "next":
    pick = lambda now, nxt: jnp.concatenate([now[:1], nxt])
  else:
    pick = lambda now, nxt: jnp.concatenate([now, nxt[-1:]])
  beta_states = pick(out.beta, out_next.beta)
  q_states = stop(pick(out.q, out_next.q))
  termination, term_extras = options.trajectory_termination_loss(
    beta_states,
    q_states,
    option,
    traj.terminated,
    traj.truncated,
    cost + config.termination_margin,
    v=state_value(q_states, config.value_over_options, epsilon),
    state_for_termination=config.state_for_termination,
  )
  del termination  # reduced over the whole batch below, from its sum and count
  return TrajectoryLosses(
    critic=critic,
    policy=policy,
    termination_sum=term_extras.loss_sum,
    termination_count=term_extras.num_valid,
    target=targets,
    td_error=critic_extras.td_error,
    entropy=pg_extras.entropy,
    beta=term_extras.beta,
    advantage=term_extras.advantage,
  )


def option_critic_objective(
  params: PyTree, network: nn.Module, traj: Transition, config
) -> tuple[Array, dict[str, Array]]:
  """The A2OC objective on a `[T, N]` rollout (batch-level: reduces over time and envs)."""
  out = network.apply(params, traj.obs)
  out_next = network.apply(params, traj.next_obs)
  per_env = jax.vmap(trajectory_losses, in_axes=(1, 1, 1, None))(out, out_next, traj, config)
  if config.loss_reduction == "sum":
    critic, policy = per_env.critic.sum(), per_env.policy.sum()
    termination = per_env.termination_sum.sum()
  else:
    critic, policy = per_env.critic.mean(), per_env.policy.mean()
    termination = per_env.termination_sum.sum() / jnp.maximum(per_env.termination_count.sum(), 1.0)
  total = config.critic_coef * critic + policy + termination
  return total, {
    "loss": total,
    "critic_loss": critic,
    "policy_loss": policy,
    "termination_loss": termination,
    "entropy": per_env.entropy.mean(),
    "td_error_abs": jnp.abs(per_env.td_error).mean(),
    "target": per_env.target.mean(),
    "termination_probability": per_env.beta.mean(),
    "termination_advantage": per_env.advantage.mean(),
  }


def make_optimizer(config) -> optax.GradientTransformation:
  """One optimizer per part (critic + torso, intra-option policies, terminations)."""

  def optimizer(learning_rate):
    if config.optimizer == "rmsprop":
      return optax.rmsprop(learning_rate, decay=0.99, eps=0.1)  # A2OC's rho and eps
    if config.optimizer == "adam":
      return optax.adam(learning_rate)
    return optax.sgd(learning_rate)

  per_part = optax.multi_transform(
    {
      "critic": optimizer(config.critic_learning_rate),
      "policy": optimizer(config.intra_option_learning_rate),
      "termination": optimizer(config.termination_learning_rate),
    },
    param_labels,
  )
  if config.max_grad_norm > 0:
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), per_part)
  return per_part


def make_network(env_spec: envs.EnvSpec, config) -> OptionCriticNetwork:
  return OptionCriticNetwork(
    num_options=config.num_options,
    num_actions=env_spec.action_dim,
    observation_ndim=len(env_spec.observation_shape),
    hidden_sizes=tuple(config.hidden_sizes),
    activation=config.activation,
    temperature=config.temperature,
    head_init_scale=config.head_init_scale,
    head_bias=config.head_bias,
  )


class OptionCriticAgent(struct.PyTreeNode):
  """Option-critic's train state: parameters and optimizer state."""

  params: PyTree
  opt_state: PyTree
  network: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config) -> "OptionCriticAgent":
    config = ml_collections.FrozenConfigDict(config)
    network = make_network(env_spec, config)
    params = common.init_params(network, key, env_spec.observation_shape)
    tx = make_optimizer(config)
    return cls(params=params, opt_state=tx.init(params), network=network, tx=tx, config=config)

  def act(self, obs: PyTree, option: Array, key: Array, epsilon=None) -> tuple[Array, OptionExtras]:
    """Actions for a batch of observations given each one's running option (`[N]`, -1: none).

    Returns the actions and `OptionExtras` (the option now running, whether it was just drawn).
    `epsilon` overrides the policy over options' `option_epsilon`.
    """
    epsilon = self.config.option_epsilon if epsilon is None else epsilon
    out = self.network.apply(self.params, obs)
    return select_options_and_actions(out, option, key, self.config, epsilon)

  def update(self, traj: Transition) -> tuple["OptionCriticAgent", dict[str, Array]]:
    """One gradient step on a `[T, N]` rollout whose `policy_extras` are `OptionExtras`."""
    return common.gradient_step(self, option_critic_objective, self.network, traj, self.config)


# ----------------------------------------------------------------------------------------------
# The run: a Learner for the CLI and `make_train` for one-program runs.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: OptionCriticAgent
  env: OptionEnvCarry  # per-environment state: sharded along the mesh's data axis
  key: Array
  update: Array  # int32 count of updates done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one A2OC update (rollout with options, one gradient step)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  steps_per_update = config.num_envs * config.num_steps
  num_updates = training.num_updates(config.total_timesteps, steps_per_update)
  network = make_network(env_spec, config)
  acting = option_policy(network, config, config.option_epsilon)
  evaluation_policy = option_policy(network, config, config.eval_option_epsilon)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = OptionCriticAgent.create(agent_key, env_spec, config)
    carry = call_and_return.reset(env, env_params, env_key, config.num_envs)
    return RunnerState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    params, num_steps, unroll = state.agent.params, config.num_steps, config.rollout_unroll
    carry, traj = call_and_return.rollout(
      env, env_params, acting, params, state.env, rollout_key, num_steps, unroll
    )
    agent, metrics = state.agent.update(traj)
    metrics.update(rollout_statistics(traj))
    metrics.update(call_and_return.option_statistics(traj))
    return RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    # Evaluate on the goal the agent is training on at this update.
    eval_params = four_rooms.current_task_params(env_params, state.update * config.num_steps)
    return call_and_return.evaluate(
      env,
      eval_params,
      evaluation_policy,
      state.agent.params,
      key,
      config.num_options,
      config.eval_episodes,
      env_params.max_steps_in_episode,
    )

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=num_updates,
    env_steps_per_update=steps_per_update,
    sharded_field="env",
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
