"""PULSE-style latent skills: distil an expert into an encoder / prior / decoder, then steer the
frozen decoder with a high-level PPO acting around the prior.

Luo, Cao, Merel, Winkler, Huang, Kitani, Xu, "Universal Humanoid Motion Representations for
Physics-Based Control" (PULSE), ICLR 2024, arXiv:2310.04582. Two modes, one agent:

* `mode = "distill"` (Section 3.2). The student is `hrljax.networks.latent_skills.
  LatentSkillModel`: an encoder q(z | s, g) residual to a learned prior p(z | s) and a decoder
  π_dec(a | s, z). DAgger-style (Ross, Gordon, Bagnell 2011, arXiv:1011.0686): the student acts,
  the frozen expert (a trained hrljax PPO run, `config.expert_run`, read with
  `hrljax.load.load_run`) labels every visited state with its action a*, and the student is
  trained on its own visits with `hrljax.losses.latent_skills.distillation_loss`:
  −log π_dec(a* | s, z), z ~ q(z | s, onehot(a*)), + λ_KL·KL(q ‖ p) + λ_AR·‖μ_t − μ_{t−1}‖²,
  λ_KL annealed linearly from `kl_coef_start` (0.01) to `kl_coef_end` (0.001) over the run,
  λ_AR = 0.005 (the values of the authors' configurations; see the loss module for what is
  reconstructed). The privileged input g of the encoder is the expert's action (PULSE's is the
  reference motion the imitator tracks: in both cases what determines the expert's action).
* `mode = "high_level"` (Section 3.3). The skill model of a distillation run
  (`config.skill_run`) is frozen; a PPO policy outputs a Gaussian a_hi in the latent space and
  the decoder acts with z = μ_p(s) + a_hi (`residual_skill`), so a_hi = 0 is the prior's
  default skill. PPO's loss, GAE and optimizer are those of `agents/ppo.py`
  (`hrljax.agents.common`); the policy's action is a_hi, the environment's action the decoder's.

Choices where PULSE does not say or does not apply, each deliberate:
  * the student acts with z sampled from the prior (`student_latent = "prior"`, what the high
    level starts from) rather than from the encoder (`"encoder"`, PULSE's rollouts): with the
    expert's action as the encoder's input, encoder rollouts would replay the expert's visits;
  * no DAgger mixing β (the student acts from the first rollout) and no dataset aggregation:
    each rollout's relabelled visits get `distill_epochs` full-batch gradient steps, then are
    dropped (PULSE's distillation is online in the same way);
  * the expert's label is a sample of its policy (`expert_action = "sample"`) or its mode
    (`"greedy"`); the decoder acts by sampling (`decoder_action = "sample"`) or its mode
    (`"mode"`, PULSE's use of the decoder's mean action);
  * discrete actions only (PULSE's decoder outputs continuous joint targets).

Evaluations are greedy: the student with z = μ_p(s) and the decoder's mode, beside the expert's
mode (`eval_expert_*`, distillation); the high level with a_hi at its mean, beside the prior
alone (`eval_prior_*`, a_hi = 0). `make_train(config)(key)` is a whole run as one XLA program.
"""

from typing import NamedTuple, Optional

import distrax
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, load, rollout, training
from hrljax.agents import common
from hrljax.losses import latent_skills as ls
from hrljax.networks import ActorCritic, policy_noise
from hrljax.networks.latent_skills import LatentActorCritic, LatentSkillModel
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

SWEEPABLE = ("learning_rate",)  # config.sweep: the high level's PPO rate (common.ppo_optimizer)
MODES = ("distill", "high_level")
STUDENT_LATENTS = ("prior", "encoder")
EXPERT_ACTIONS = ("sample", "greedy")
DECODER_ACTIONS = ("sample", "mode")


def get_config() -> ml_collections.ConfigDict:
  """The distillation's and the high level's hyperparameters (PPO's from `common`)."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "latent_skills"
  common.add_ppo_fields(config)  # environment, budget and the high level's PPO fields
  config.mode = "distill"  # "distill" (train the skill model) or "high_level" (PPO over it)
  config.expert_run = ""  # distill: workdir of the trained PPO run that labels the visits
  config.expert_action = "sample"  # the expert's label: a sample of its policy, or "greedy"
  config.student_latent = "prior"  # distill: the student acts with z ~ prior, or "encoder"
  config.latent_dim = 8  # distill: dimension of z (the authors' configurations: 8 to 64)
  config.skill_hidden_sizes = (64, 64)  # distill: prior, encoder and decoder MLPs
  config.skill_learning_rate = 1e-3  # distill: Adam
  config.distill_epochs = 4  # distill: full-batch gradient steps per rollout
  config.kl_coef_start = 0.01  # λ_KL at the first update (PULSE)...
  config.kl_coef_end = 0.001  # ...annealed linearly to this at the last
  config.ar_coef = 0.005  # λ_AR of the latent smoothness term (PULSE)
  config.skill_run = ""  # high_level: workdir of the distillation run whose model is frozen
  config.decoder_action = "sample"  # the decoder's action: a sample, or its "mode"
  config.a_hi_log_std_init = 0.0  # high_level: log std of a_hi at the start (PPO's 0: std 1)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  common.validate_ppo_fields(config, num_devices)
  checks.one_of(config, "mode", MODES)
  checks.one_of(config, "expert_action", EXPERT_ACTIONS)
  checks.one_of(config, "student_latent", STUDENT_LATENTS)
  checks.one_of(config, "decoder_action", DECODER_ACTIONS)
  checks.positive_int(config, "latent_dim", "distill_epochs")
  checks.positive(config, "skill_learning_rate")
  checks.non_negative(config, "kl_coef_start", "kl_coef_end", "ar_coef")
  value = config.a_hi_log_std_init
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not -5.0 <= value <= 2.0:
    raise checks.ConfigError(
      f"config.a_hi_log_std_init: expected a number in [-5, 2] (the clip of the Gaussian head), "
      f"got {value!r}"
    )
  sizes = tuple(config.skill_hidden_sizes)
  if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
    raise checks.ConfigError(
      f"config.skill_hidden_sizes: expected a non-empty tuple of positive ints, got {sizes!r}"
    )
  run_field = "expert_run" if config.mode == "distill" else "skill_run"
  if not isinstance(config[run_field], str) or not config[run_field]:
    raise checks.ConfigError(
      f"config.{run_field}: expected the workdir of a trained "
      f"{'ppo' if config.mode == 'distill' else 'latent_skills distill'} run for mode "
      f"{config.mode!r}, got {config[run_field]!r}"
    )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  if not envs.spec(env, env_params).discrete:
    raise checks.ConfigError(
      f"config.env_name: expected an environment with discrete actions, got {config.env_name!r}"
    )


# ----------------------------------------------------------------------------------------------
# The frozen parts: the expert (distillation) and the skill model (high level).
# ----------------------------------------------------------------------------------------------


class FrozenPolicy(NamedTuple):
  """A trained actor-critic and its parameters (the expert)."""

  network: ActorCritic
  params: PyTree


class Skills(NamedTuple):
  """A distilled skill model and its parameters (frozen under the high level)."""

  model: LatentSkillModel
  params: PyTree


def skill_model(env_spec: envs.EnvSpec, config) -> LatentSkillModel:
  return LatentSkillModel(
    num_actions=env_spec.action_dim,
    latent_dim=config.latent_dim,
    hidden_sizes=tuple(config.skill_hidden_sizes),
    activation=config.activation,
    observation_ndim=len(env_spec.observation_shape),
  )


def load_expert(workdir: str) -> FrozenPolicy:
  """The policy of the PPO run in `workdir` (its first seed), through `hrljax.load.load_run`."""
  run = load.load_run(workdir)
  if run.config.agent != "ppo":
    raise ValueError(
      f"expert_run: expected the workdir of a ppo run, got {workdir!r} of agent "
      f"{run.config.agent!r}"
    )
  agent = run.seed_state().agent
  return FrozenPolicy(agent.network, agent.params)


def load_skills(workdir: str) -> Skills:
  """The skill model of the distillation run in `workdir` (its first seed)."""
  run = load.load_run(workdir)
  if run.config.agent != "latent_skills" or run.config.mode != "distill":
    raise ValueError(
      f"skill_run: expected the workdir of a latent_skills run with mode 'distill', got "
      f"{workdir!r} ({run.config.agent!r}, mode {run.config.get('mode')!r})"
    )
  agent = run.seed_state().agent
  return Skills(agent.model, agent.params)


# ----------------------------------------------------------------------------------------------
# Either mode's run: its state, `init` and the greedy evaluation beside a baseline.
# ----------------------------------------------------------------------------------------------


class RunState(struct.PyTreeNode):
  agent: PyTree  # the mode's agent: `SkillAgent` (distill) or `HighLevelAgent` (high level)
  env: EnvCarry  # sharded along the mesh's data axis
  key: Array
  update: Array  # int32


def _learner(config, env, env_params, num_updates, create_agent, step, greedy, baseline) -> Learner:
  """The `Learner` of a mode: `init` resets `num_envs` environments beside `create_agent(key)`,
  `evaluate` runs `greedy` on the agent's parameters and, on the same episodes, `baseline =
  (name, policy, params)`, whose statistics are reported as `eval_{name}_*`."""
  name, baseline_policy, baseline_params = baseline

  def init(key: Array) -> RunState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = create_agent(agent_key)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return RunState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def evaluate(state: RunState, key: Array) -> dict[str, Array]:
    episodes, max_steps = config.eval_episodes, env_params.max_steps_in_episode
    result = rollout.evaluate(env, env_params, greedy, state.agent.params, key, episodes, max_steps)
    other = rollout.evaluate(
      env, env_params, baseline_policy, baseline_params, key, episodes, max_steps
    )
    result.update({f"eval_{name}_{k[len('eval_') :]}": v for k, v in other.items()})
    return result

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=num_updates,
    env_steps_per_update=config.num_envs * config.num_steps,
    sharded_field="env",
  )


# ----------------------------------------------------------------------------------------------
# Distillation.
# ----------------------------------------------------------------------------------------------


class SkillAgent(struct.PyTreeNode):
  """The student's train state: the skill model's parameters and Adam's state."""

  params: PyTree
  opt_state: PyTree
  model: LatentSkillModel = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config) -> "SkillAgent":
    model = skill_model(env_spec, config)
    obs = jnp.zeros((1,) + tuple(env_spec.observation_shape), jnp.float32)
    params = model.init(key, obs, jnp.zeros((1, env_spec.action_dim), jnp.float32))
    tx = optax.adam(config.skill_learning_rate)
    return cls(params=params, opt_state=tx.init(params), model=model, tx=tx)

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """Actions from the prior: z = μ_p(s) and the decoder's mode if `deterministic`, else
    z ~ p(z | s) and a ~ π_dec(a | s, z)."""
    mean, log_std = self.model.apply(self.params, obs, method=LatentSkillModel.prior)
    if deterministic:
      return self.model.apply(self.params, obs, mean, method=LatentSkillModel.decode).mode()
    z_key, a_key = jax.random.split(key)
    z = mean + jnp.exp(log_std) * jax.random.normal(z_key, mean.shape)
    return self.model.apply(self.params, obs, z, method=LatentSkillModel.decode).sample(seed=a_key)


def distillation_objective(
  params: PyTree,
  model: LatentSkillModel,
  obs: PyTree,
  expert_action: Array,
  done: Array,
  eps: Array,
  kl_coef: Array,
  ar_coef: float,
) -> tuple[Array, dict[str, Array]]:
  """The mean over environments of `ls.distillation_loss` on a `[T, N]` rollout, z drawn from the
  posterior with the standard-normal `eps` `[T, N, D]` (reparameterised)."""
  condition = jax.nn.one_hot(expert_action, model.num_actions)
  q_mean, q_log_std, p_mean, p_log_std = model.apply(
    params, obs, condition, method=LatentSkillModel.posterior
  )
  z = q_mean + jnp.exp(q_log_std) * eps
  logits = model.apply(params, obs, z, method=LatentSkillModel.decode).logits

  def one(logits, action, q_mean, q_log_std, p_mean, p_log_std, done):
    return ls.distillation_loss(
      logits, action, q_mean, q_log_std, p_mean, p_log_std, done, kl_coef=kl_coef, ar_coef=ar_coef
    )

  losses, extras = jax.vmap(one, in_axes=1)(
    logits, expert_action, q_mean, q_log_std, p_mean, p_log_std, done
  )
  loss = jnp.mean(losses)
  prior_logits = model.apply(params, obs, p_mean, method=LatentSkillModel.decode).logits
  prior_accuracy = jnp.mean(
    (jnp.argmax(prior_logits, axis=-1) == expert_action).astype(jnp.float32)
  )
  return loss, {
    "loss": loss,
    "nll": jnp.mean(extras.nll),
    "kl": jnp.mean(extras.kl),
    "smoothness": jnp.mean(extras.smoothness),
    "accuracy": jnp.mean(extras.accuracy),  # the decoder at z ~ q (the encoder sees a*)
    "prior_accuracy": jax.lax.stop_gradient(prior_accuracy),  # at z = μ_p(s): what the prior does
    "prior_std": jnp.mean(jnp.exp(p_log_std)),
  }


def _distill_learner(
  config, env, env_params, env_spec, num_updates, expert: FrozenPolicy
) -> Learner:
  greedy_expert = config.expert_action == "greedy"
  num_actions = env_spec.action_dim
  model = skill_model(env_spec, config)

  def noise(key, num_steps):
    keys = jax.random.split(key, 3)
    gumbel = lambda k: policy_noise(k, (num_steps, config.num_envs, num_actions), True)
    eps = jax.random.normal(keys[2], (num_steps, config.num_envs, config.latent_dim))
    return gumbel(keys[0]), gumbel(keys[1]), eps

  def student_policy(model):
    def policy(params, obs, step_noise):
      skill_params, expert_params = params
      expert_noise, student_noise, eps = step_noise
      expert_logits = expert.network.apply(expert_params, obs, method=ActorCritic.policy).logits
      label = expert_logits if greedy_expert else expert_logits + expert_noise
      expert_action = jnp.argmax(label, axis=-1)
      if config.student_latent == "prior":
        mean, log_std = model.apply(skill_params, obs, method=LatentSkillModel.prior)
      else:
        condition = jax.nn.one_hot(expert_action, num_actions)
        mean, log_std, _, _ = model.apply(
          skill_params, obs, condition, method=LatentSkillModel.posterior
        )
      z = mean + jnp.exp(log_std) * eps
      logits = model.apply(skill_params, obs, z, method=LatentSkillModel.decode).logits
      return jnp.argmax(logits + student_noise, axis=-1), expert_action

    return policy

  def step(state: RunState) -> tuple[RunState, dict[str, Array]]:
    key, rollout_key, loss_key = jax.random.split(state.key, 3)
    agent = state.agent
    carry, traj = rollout.rollout(
      env,
      env_params,
      student_policy(agent.model),
      (agent.params, expert.params),
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
      noise_fn=noise,
    )
    fraction = state.update.astype(jnp.float32) / max(num_updates - 1, 1)
    kl_coef = config.kl_coef_start + (config.kl_coef_end - config.kl_coef_start) * fraction

    def gradient_step(agent, step_key):
      eps = jax.random.normal(step_key, traj.action.shape + (config.latent_dim,))
      args = (agent.model, traj.obs, traj.policy_extras, traj.done, eps, kl_coef, config.ar_coef)
      return common.gradient_step(agent, distillation_objective, *args)

    keys = jax.random.split(loss_key, config.distill_epochs)
    agent, metrics = jax.lax.scan(gradient_step, agent, keys)
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics["kl_coef"] = kl_coef
    metrics["student_agreement"] = jnp.mean((traj.action == traj.policy_extras).astype(jnp.float32))
    metrics.update(rollout.rollout_statistics(traj))
    new_state = RunState(agent=agent, env=carry, key=key, update=state.update + 1)
    return new_state, metrics

  def student(params, obs, _):
    mean, _ = model.apply(params, obs, method=LatentSkillModel.prior)
    return model.apply(params, obs, mean, method=LatentSkillModel.decode).mode(), None

  def teacher(params, obs, _):
    return expert.network.apply(params, obs, method=ActorCritic.policy).mode(), None

  create_agent = lambda key: SkillAgent.create(key, env_spec, config)
  baseline = ("expert", teacher, expert.params)
  return _learner(config, env, env_params, num_updates, create_agent, step, student, baseline)


# ----------------------------------------------------------------------------------------------
# The high level: PPO over a_hi, z = μ_p(s) + a_hi, the skill model frozen.
# ----------------------------------------------------------------------------------------------


class HighLevelAgent(struct.PyTreeNode):
  """The high level's PPO train state (`common.minibatch_epochs` reads `key`, `params`,
  `opt_state`, `tx`)."""

  params: PyTree
  opt_state: PyTree
  key: Array
  network: LatentActorCritic = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)


def decode_action(skills: Skills, obs: PyTree, a_hi: Array, gumbel: Optional[Array]) -> Array:
  """The environment's action for the high-level action a_hi: the decoder at z = μ_p(s) + a_hi,
  sampled with the Gumbel noise `gumbel`, or its mode when `gumbel` is None."""
  prior_mean, _ = skills.model.apply(skills.params, obs, method=LatentSkillModel.prior)
  z = ls.residual_skill(prior_mean, a_hi)
  dist: distrax.Categorical = skills.model.apply(
    skills.params, obs, z, method=LatentSkillModel.decode
  )
  return dist.mode() if gumbel is None else jnp.argmax(dist.logits + gumbel, axis=-1)


def _high_level_learner(config, env, env_params, env_spec, num_updates, skills: Skills) -> Learner:
  if skills.model.num_actions != env_spec.action_dim:
    raise ValueError(
      f"skill_run: expected a skill model of {env_spec.action_dim} actions, got "
      f"{skills.model.num_actions}"
    )
  latent_dim = skills.model.latent_dim
  network = LatentActorCritic(
    latent_dim=latent_dim,
    hidden_sizes=tuple(config.hidden_sizes),
    activation=config.activation,
    observation_ndim=len(env_spec.observation_shape),
    log_std_init=config.a_hi_log_std_init,
  )
  sample_decoder = config.decoder_action == "sample"

  def create_agent(key: Array) -> HighLevelAgent:
    params_key, shuffle_key = jax.random.split(key)
    params = common.init_params(network, params_key, env_spec.observation_shape)
    tx = common.ppo_optimizer(config, num_updates)
    return HighLevelAgent(params, tx.init(params), shuffle_key, network, tx)

  def noise(key, num_steps):
    hi_key, dec_key = jax.random.split(key)
    eps = jax.random.normal(hi_key, (num_steps, config.num_envs, latent_dim))
    gumbel = policy_noise(dec_key, (num_steps, config.num_envs, env_spec.action_dim), True)
    return eps, gumbel

  def policy(params, obs, step_noise):
    eps, gumbel = step_noise
    dist, value = network.apply(params, obs)
    a_hi = dist.loc + dist.scale_diag * eps
    action = decode_action(skills, obs, a_hi, gumbel if sample_decoder else None)
    return action, (a_hi, dist.log_prob(a_hi), value)

  def minibatch_step(agent, minibatch):
    return common.gradient_step(agent, common.ppo_objective, agent.network, minibatch, config)

  def step(state: RunState) -> tuple[RunState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    carry, traj = rollout.rollout(
      env,
      env_params,
      policy,
      state.agent.params,
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
      noise_fn=noise,
    )
    a_hi, log_prob, value = traj.policy_extras
    next_value = network.apply(state.agent.params, traj.next_obs, method=LatentActorCritic.value)
    discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))
    advantage = common.per_environment_gae(
      traj.reward, discount, value, next_value, traj.done, config.gae_lambda
    )
    batch = common.ppo_batch(traj.obs, a_hi, log_prob, value, advantage, config.shuffle_shards)
    agent, metrics = common.minibatch_epochs(
      state.agent,
      batch,
      minibatch_step,
      config.num_minibatches,
      config.update_epochs,
      config.shuffle_shards,
      config.num_envs,
    )
    metrics["a_hi_norm"] = jnp.mean(jnp.linalg.norm(a_hi, axis=-1))
    metrics.update(rollout.rollout_statistics(traj))
    new_state = RunState(agent=agent, env=carry, key=key, update=state.update + 1)
    return new_state, metrics

  def greedy(params, obs, _):
    return decode_action(skills, obs, network.apply(params, obs)[0].mode(), None), None

  def prior_only(params, obs, _):
    a_hi = jnp.zeros(jax.tree.leaves(obs)[0].shape[:1] + (latent_dim,), jnp.float32)
    return decode_action(skills, obs, a_hi, None), None

  baseline = ("prior", prior_only, None)
  return _learner(config, env, env_params, num_updates, create_agent, step, greedy, baseline)


def make_learner(
  config: ml_collections.ConfigDict,
  expert: Optional[FrozenPolicy] = None,
  skills: Optional[Skills] = None,
) -> Learner:
  """The `Learner` of `config.mode`: distillation (one rollout of the student relabelled by the
  expert, then `distill_epochs` gradient steps, per step) or the high level (one PPO update per
  step). `expert` / `skills`: the frozen parts, default those of `config.expert_run` /
  `config.skill_run`."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  num_updates = training.num_updates(config.total_timesteps, config.num_envs * config.num_steps)
  if config.mode == "distill":
    expert = load_expert(config.expert_run) if expert is None else expert
    return _distill_learner(config, env, env_params, env_spec, num_updates, expert)
  if config.mode == "high_level":
    skills = load_skills(config.skill_run) if skills is None else skills
    return _high_level_learner(config, env, env_params, env_spec, num_updates, skills)
  raise ValueError(f"config.mode: expected one of {MODES}, got {config.mode!r}")


def make_train(
  config: ml_collections.ConfigDict,
  expert: Optional[FrozenPolicy] = None,
  skills: Optional[Skills] = None,
):
  """`train(key) -> (final state, per-update metrics)`: a whole run as one program."""
  return training.whole_run(make_learner(config, expert, skills))
