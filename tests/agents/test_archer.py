"""Tests of hrljax.agents.archer: config checks, the objectives' gradients (targets and the other
network get none), Polyak and warm-up mechanics of an update, advantage normalisation, critic
diagnostics, the replayed transitions, a smoke run with determinism, the experiment config, the
separately computed warm start, critic pretraining and the q_gap gates of the warm-up (the 8-device
equivalence: test_eight_devices.py). The shared warm start and helpers: test_token_common.py."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import archer
from hrljax.agents import token_common as tc
from hrljax.config_checks import ConfigError
from hrljax.envs import token_game
from hrljax.losses import hierarchical_critics as hc
from hrljax.networks import transformer
from tests.fast_compile import fast_jit
from tests.same_numbers import as_numpy

TINY_GAME = dict(num_items=4, num_attributes=2, num_values=2, max_turns=3)


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  config = archer.get_config()
  config.env_kwargs = ml_collections.ConfigDict(TINY_GAME)
  config.d_model = 16
  config.num_layers = 1
  config.num_heads = 2
  config.critic_d_model = 16
  config.critic_num_layers = 1
  config.bc_steps = 2
  config.bc_batch_size = 8
  config.bc_dataset_episodes = 4
  config.num_envs = 4
  config.num_steps = 3
  config.batch_size = 8
  config.critic_updates = 2
  config.actor_updates = 1
  config.warmup_iters = 1
  config.buffer_size = 64
  config.total_timesteps = 4 * 3 * 3
  config.eval_episodes = 4
  for name, value in overrides.items():
    config[name] = value
  return config


@pytest.fixture(scope="module")
def run():
  """Two iterations of a tiny run (one critic step each; the first is critic-only warm-up),
  compiled once and run twice from the same key."""
  config = tiny_config(bc_steps=0, critic_updates=1, train_eval_episodes=4)
  learner = archer.make_learner(config)
  init, step = fast_jit(learner.init), fast_jit(learner.step)
  states, metrics = [], []
  for _ in range(2):
    state = init(jax.random.key(0))
    history, logs = [state], []
    for _ in range(2):
      state, m = step(state)
      history.append(state)
      logs.append(m)
    states.append(history)
    metrics.append(logs)
  _, env_params = envs.make(config.env_name, **config.env_kwargs)
  return learner, env_params, states, metrics


# The warm-started learners: a BC start (3 steps) and the critic's encoder copied from the
# policy's trunk. Key 0, the `run` fixture's, so that their critics' heads are the random ones of
# `run` (the critic's init key does not depend on the config).
WARM = dict(
  bc_steps=3, critic_init="policy", critic_causal=True, critic_readout="last", critic_updates=1
)
WARM_KEY = 0


@pytest.fixture(scope="module")
def warm_start():
  """The BC start of `tiny_config(**WARM)` computed once as its own program; that config's
  learner (its actor gated on a fresh q_gap of 0.99, out of reach); and, from one program, its
  `init(key)` (BC inside), its `init(key, policy_params)` and the `init(key, policy_params)` of
  `pretrain_config()`. Shared by the warm-start, critic-init, critic-pretraining and gate tests."""
  config = tiny_config(**WARM, warmup_fresh_q_gap=0.99)
  key = jax.random.key(WARM_KEY)
  policy_params = fast_jit(lambda k: tc.warm_start_policy_params(k, config))(key)
  learner = archer.make_learner(config)
  pretrain_learner = archer.make_learner(pretrain_config())
  whole, split, pretrained = fast_jit(
    lambda k, p: (learner.init(k), learner.init(k, p), pretrain_learner.init(k, p))
  )(key, policy_params)
  return dict(
    config=config,
    key=key,
    policy_params=policy_params,
    learner=learner,
    whole=whole,
    split=split,
    pretrain_learner=pretrain_learner,
    pretrained=pretrained,
  )


def pretrain_config() -> ml_collections.ConfigDict:
  """The warm start with 3 critic pretraining steps, its actor gated on a replayed-batch q_gap of
  0.99 (out of reach)."""
  return tiny_config(**WARM, critic_pretrain_steps=3, warmup_q_gap=0.99)


def _replayed(state) -> tc.UtteranceTransition:
  """The items written to the buffer so far (NumPy: slicing compiles nothing)."""
  size = int(state.buffer.size)
  return jax.tree.map(lambda x: np.asarray(x)[:size], state.buffer.storage)


def _abs_sum(tree) -> float:
  return float(sum(np.abs(np.asarray(x, np.float64)).sum() for x in jax.tree.leaves(tree)))


def _abs_diff(a, b) -> float:
  """Sum of |a - b| over two trees of the same structure (NumPy, float64)."""
  return float(
    sum(
      np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).sum()
      for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )
  )


# ----------------------------------------------------------------------------------------------
# Config.
# ----------------------------------------------------------------------------------------------


def test_default_and_experiment_configs_validate(experiment_config):
  archer.validate_config(archer.get_config())
  config = experiment_config("archer_token_game")
  archer.validate_config(config, num_devices=2)
  assert config.agent == "archer"


@pytest.mark.parametrize(
  "field,value,message",
  [
    ("critic_updates", 0, "config.critic_updates: expected an integer > 0"),
    ("warmup_iters", -1, "config.warmup_iters: expected an integer >= 0"),
    ("bc_steps", -1, "config.bc_steps: expected an integer >= 0"),
    ("tau", 1.5, "config.tau: expected a number in"),
    ("q_target_heads", "mean", "config.q_target_heads: expected one of"),
    ("critic_utterance_encoding", "concat", "config.critic_utterance_encoding"),
    ("bc_random_question_prob", 2.0, "config.bc_random_question_prob"),
    ("env_name", "CartPole-v1", "config.env_name: expected 'TokenGame-v0'"),
    ("critic_d_model", 15, "config.critic_d_model: expected a multiple of config.num_heads"),
    ("total_timesteps", 5, "config.total_timesteps: expected at least 12"),
    ("advantage_normalization", "rank", "config.advantage_normalization: expected one of"),
    ("train_eval_episodes", -1, "config.train_eval_episodes: expected an integer >= 0"),
    ("warmup_q_gap", 1.0, "config.warmup_q_gap: expected a number in [0, 1)"),
    ("warmup_q_gap", -0.1, "config.warmup_q_gap: expected a number in [0, 1)"),
    ("warmup_fresh_q_gap", 1.0, "config.warmup_fresh_q_gap: expected a number in [0, 1)"),
    ("critic_readout", "cls", "config.critic_readout: expected one of"),
    ("critic_init", "roberta", "config.critic_init: expected one of"),
    ("actor_optimizer", "rmsprop", "config.actor_optimizer: expected one of"),
    ("critic_pretrain_steps", -1, "config.critic_pretrain_steps: expected an integer >= 0"),
    ("critic_v_samples", 0, "config.critic_v_samples: expected an integer > 0"),
    ("critic_weight_decay", -0.1, "config.critic_weight_decay: expected a finite number >= 0"),
  ],
)
def test_validate_config_names_the_field(field, value, message):
  pattern = message
  for char in "().[]":
    pattern = pattern.replace(char, "\\" + char)
  with pytest.raises(ConfigError, match=pattern):
    archer.validate_config(tiny_config(**{field: value}))


def test_critic_from_the_policy_needs_the_policy_size():
  with pytest.raises(ConfigError, match=r"config\.critic_d_model: expected config\.d_model \(16\)"):
    archer.validate_config(tiny_config(critic_init="policy", critic_d_model=32))
  with pytest.raises(ConfigError, match=r"config\.critic_num_layers: expected config\.num_layers"):
    archer.validate_config(tiny_config(critic_init="policy", critic_num_layers=2))


def test_critic_init_from_the_policy_copies_its_trunk_into_critic_and_target(warm_start, run):
  """`critic_init="policy"`: the critic's encoder (and the target's) is the BC policy's trunk
  (position table cut to the critic's length); the heads are the random ones of "random" (the
  `run` fixture's critic, drawn from the same key)."""
  agent = warm_start["split"].agent
  random_critic = run[2][0][0].agent.critic_params
  trunk = agent.policy_params["params"]["trunk"]
  for params in (agent.critic_params, agent.target_critic_params):
    encoder = params["params"]["encoder"]
    rows = encoder["position_embed"]["embedding"].shape[0]
    np.testing.assert_array_equal(
      encoder["position_embed"]["embedding"], trunk["position_embed"]["embedding"][:rows]
    )
    np.testing.assert_array_equal(
      encoder["token_embed"]["embedding"], trunk["token_embed"]["embedding"]
    )
    for a, b in zip(jax.tree.leaves(encoder["blocks_0"]), jax.tree.leaves(trunk["blocks_0"])):
      np.testing.assert_array_equal(a, b)
    for name in ("q_heads", "v_heads"):
      for a, b in zip(
        jax.tree.leaves(params["params"][name]),
        jax.tree.leaves(random_critic["params"][name]),
        strict=True,
      ):
        np.testing.assert_array_equal(a, b)
  assert (
    _abs_diff(agent.critic_params["params"]["encoder"], random_critic["params"]["encoder"]) > 0.0
  )


def test_num_envs_must_divide_over_devices():
  with pytest.raises(ConfigError, match=r"config\.num_envs: expected a multiple"):
    archer.validate_config(tiny_config(num_envs=6), num_devices=4)


# ----------------------------------------------------------------------------------------------
# The warm start and the replayed transitions.
# ----------------------------------------------------------------------------------------------


def test_replayed_transitions_keep_terminated_and_the_true_successor(run):
  _, env_params, states, _ = run
  items = _replayed(states[0][1])
  assert items.dialogue.shape == (12, token_game.max_dialogue_len(env_params))
  assert items.utterance.shape == (12, env_params.utterance_len)
  # The successor extends the dialogue by the recorded utterance and one answer token (it is the
  # state after the utterance, never the auto-reset one).
  used = np.sum(np.asarray(items.dialogue) != token_game.PAD, axis=1)
  used_next = np.sum(np.asarray(items.next_dialogue) != token_game.PAD, axis=1)
  assert np.all(used_next >= used + 2)
  np.testing.assert_array_equal(np.asarray(items.next_dialogue)[:, :1], token_game.BOS)
  # A positive reward (a correct guess) always ends the game; the turn limit terminates too.
  reward, terminated = np.asarray(items.reward), np.asarray(items.terminated)
  assert np.all(terminated[reward > 0])


# ----------------------------------------------------------------------------------------------
# Gradients: targets and the other network get none.
# ----------------------------------------------------------------------------------------------


def test_objectives_train_only_their_own_network(run):
  """Critic loss: only the online critic gets a gradient (targets, target critic and the policy's
  samples none); actor loss: only the policy (the critic's advantage none)."""
  _, env_params, states, _ = run
  agent, items = states[0][1].agent, _replayed(states[0][1])

  @fast_jit
  def grads(critic_params, policy_params):
    # A target critic different from the online one, so that a leak could not hide.
    target_params = jax.tree.map(lambda x: 1.1 * x + 0.01, critic_params)
    critic_grads = jax.grad(
      lambda c, t, p: archer.critic_objective(
        c, t, p, agent.critic, agent.policy, items, jax.random.key(5), agent.config
      )[0],
      argnums=(0, 1, 2),
    )(critic_params, target_params, policy_params)
    actor_grads = jax.grad(
      lambda p, c: archer.actor_objective(
        p,
        c,
        agent.critic,
        agent.policy,
        items.dialogue,
        jax.random.key(6),
        agent.config,
        env_params.utterance_len,
      )[0],
      argnums=(0, 1),
    )(policy_params, critic_params)
    return critic_grads, actor_grads

  (d_critic, d_target, d_policy), (a_policy, a_critic) = grads(
    agent.critic_params, agent.policy_params
  )
  assert _abs_sum(d_critic) > 0.0
  assert _abs_sum(d_target) == 0.0
  assert _abs_sum(d_policy) == 0.0
  assert _abs_sum(a_policy) > 0.0
  assert _abs_sum(a_critic) == 0.0


def test_sgd_actor_steps_by_the_clipped_gradient_while_the_critic_keeps_adam(run):
  """`actor_optimizer="sgd"`: the actor moves by -lr x the (norm-clipped) advantage-weighted
  gradient, so its step scales with the advantage; the critic keeps `optimizer`'s Adam."""
  _, env_params, states, _ = run
  base = states[0][1].agent
  config = tiny_config(actor_optimizer="sgd", actor_learning_rate=0.5)
  env_and_params = envs.make(config.env_name, **config.env_kwargs)
  # Jitted: op by op, the networks' and optimizers' initialisation compiles a hundred programs.
  agent = fast_jit(lambda k, p: archer.ArcherAgent.create(k, *env_and_params, config, p))(
    jax.random.key(0), base.policy_params
  )
  dialogue = _replayed(states[0][1]).dialogue

  @fast_jit
  def step_and_grads(agent, dialogue):
    """The actor step and, from the same key, the gradient it should step by: one program."""
    _, sample_key = jax.random.split(agent.key)
    grads = jax.grad(
      lambda p: archer.actor_objective(
        p,
        agent.critic_params,
        agent.critic,
        agent.policy,
        dialogue,
        sample_key,
        agent.config,
        env_params.utterance_len,
      )[0]
    )(agent.policy_params)
    return agent.actor_step(dialogue)[0], grads

  moved, grads = step_and_grads(agent, dialogue)
  norm = np.sqrt(sum(np.sum(np.asarray(g, np.float64) ** 2) for g in jax.tree.leaves(grads)))
  scale = min(1.0, config.max_grad_norm / norm)
  expected = jax.tree.map(
    lambda p, g: np.asarray(p) - 0.5 * scale * np.asarray(g), agent.policy_params, grads
  )
  for got, want in zip(jax.tree.leaves(moved.policy_params), jax.tree.leaves(expected)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  assert "ScaleByAdamState" in repr(agent.critic_opt_state)
  assert "ScaleByAdamState" not in repr(agent.policy_opt_state)


def test_iterations_polyak_target_and_warm_up(run):
  """The critic step moves the target to τ·online' + (1 − τ)·target (post-step online params);
  the actor trains only after `warmup_iters` (1) critic-only iterations."""
  learner, _, states, metrics = run
  before, warm, trained = states[0]
  tau = warm.agent.config.tau
  for old_t, online, new_t in zip(
    jax.tree.leaves(before.agent.target_critic_params),
    jax.tree.leaves(warm.agent.critic_params),
    jax.tree.leaves(warm.agent.target_critic_params),
  ):
    expected = tau * np.asarray(online, np.float64) + (1 - tau) * np.asarray(old_t, np.float64)
    np.testing.assert_allclose(new_t, expected, rtol=1e-5, atol=1e-6)
  assert _abs_diff(warm.agent.critic_params, before.agent.critic_params) > 0.0
  assert _abs_diff(warm.agent.policy_params, before.agent.policy_params) == 0.0
  assert float(metrics[0][0]["actor_loss"]) == 0.0
  assert _abs_diff(trained.agent.policy_params, warm.agent.policy_params) > 0.0
  assert float(metrics[0][1]["sequence_log_prob"]) < 0.0


def test_batch_advantage_normalisation_standardises_the_critic_advantage(run):
  """With the same key (same sampled utterances), "batch" weights the REINFORCE term by
  (A − mean A) / std A of the raw ArCHer advantage ("none"), computed here in float64."""
  _, env_params, states, _ = run
  agent, items = states[0][1].agent, _replayed(states[0][1])

  def objective(mode):
    config = ml_collections.FrozenConfigDict(
      dict(agent.config.as_configdict().to_dict(), advantage_normalization=mode)
    )
    return archer.actor_objective(
      agent.policy_params,
      agent.critic_params,
      agent.critic,
      agent.policy,
      items.dialogue,
      jax.random.key(6),
      config,
      env_params.utterance_len,
    )

  (_, raw), (loss, normalised) = fast_jit(lambda: (objective("none"), objective("batch")))()
  raw_advantage = np.asarray(raw.advantage, np.float64)
  expected = (raw_advantage - raw_advantage.mean()) / (raw_advantage.std() + 1e-6)
  np.testing.assert_allclose(normalised.advantage, expected, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(normalised.sequence_log_prob, raw.sequence_log_prob, rtol=1e-6)
  seq_logp = np.asarray(raw.sequence_log_prob, np.float64)
  np.testing.assert_allclose(loss, -np.mean(expected * seq_logp), rtol=1e-4, atol=1e-5)


def test_critic_diagnostics_separate_successes_from_failures():
  """min over heads of Q, averaged over correct guesses (a reward above the turn reward) and
  over failed final utterances (terminated with the turn reward); a kind absent from the batch
  gives 0. Under the Twenty Questions rules (a win earns 0, every other turn -1) the same
  outcomes give the same means."""
  q = np.array([[0.9, 0.1, 0.4, 0.3], [0.7, 0.2, 0.5, 0.0]], np.float32)  # [E=2, B=4]
  q_target = np.full_like(q, 0.25)
  extras = hc.CriticExtras(
    q_target=jnp.asarray(q_target),
    v_target=jnp.zeros_like(q),
    q_td_error=jnp.asarray(q_target - q),
    v_error=jnp.zeros_like(q),
    q_head_loss=jnp.zeros(2),
    v_head_loss=jnp.zeros(2),
    loss_sum=jnp.zeros(()),
    denominator=jnp.ones(()),
  )
  batch = tc.UtteranceTransition(
    dialogue=jnp.zeros((4, 3), jnp.int32),
    utterance=jnp.zeros((4, 4), jnp.int32),
    reward=jnp.array([1.0, 0.0, 0.0, 0.0]),
    next_dialogue=jnp.zeros((4, 3), jnp.int32),
    terminated=jnp.array([True, True, False, True]),
  )
  twenty_questions = batch._replace(reward=batch.reward - 1.0)
  for rewards, turn_reward in ((batch, 0.0), (twenty_questions, -1.0)):
    out = tc.critic_diagnostics(extras, rewards, turn_reward)
    np.testing.assert_allclose(out["q_success"], 0.7, rtol=1e-6)
    np.testing.assert_allclose(out["q_failure"], (0.1 + 0.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(out["q_gap"], 0.7 - 0.05, rtol=1e-6)
  none = tc.critic_diagnostics(extras, batch._replace(reward=jnp.zeros(4)), 0.0)
  assert float(none["q_success"]) == 0.0


def test_the_agent_tells_a_win_by_its_game_s_turn_reward():
  """Under the Twenty Questions rules a win earns 0: the agent's diagnostics and q_gap gates
  read wins as rewards above the game's turn reward (-1), not above 0 (traced, not compiled)."""
  rules = {**TINY_GAME, **token_game.TWENTY_QUESTIONS_RULES}
  config = tiny_config(bc_steps=0, env_kwargs=ml_collections.ConfigDict(rules))
  for config, turn_reward in ((config, -1.0), (tiny_config(bc_steps=0), 0.0)):
    state = jax.eval_shape(archer.make_learner(config).init, jax.random.key(0))
    assert state.agent.turn_reward == turn_reward


# ----------------------------------------------------------------------------------------------
# Runs.
# ----------------------------------------------------------------------------------------------


def test_runs_are_deterministic_and_report_episodes(run):
  learner, _, states, metrics = run
  for m_a, m_b in zip(metrics[0], metrics[1]):
    for name in (
      "critic_loss",
      "actor_loss",
      "episodes",
      "episode_return_sum",
      "q_value",
      "q_gap",
      "eval_return",
    ):
      np.testing.assert_array_equal(m_a[name], m_b[name])
      assert np.isfinite(float(m_a[name]))
  assert sum(float(m["episodes"]) for m in metrics[0]) > 0
  # The in-training greedy evaluation is a success rate over 4 games.
  assert all(float(m["eval_return"]) * 4 in (0.0, 1.0, 2.0, 3.0, 4.0) for m in metrics[0])
  assert int(states[0][-1].buffer.size) == 24
  same_params = jax.tree.map(
    lambda a, b: bool(np.all(np.asarray(a) == np.asarray(b))),
    states[0][-1].agent.policy_params,
    states[1][-1].agent.policy_params,
  )
  assert all(jax.tree.leaves(same_params))
  assert learner.env_steps_per_update == 12


def test_evaluation_plays_the_run_s_fixed_games_whatever_key_the_loop_passes(run):
  """The loop passes a new key at every evaluation; the learner plays the games of the run's own
  evaluation key, so an unchanged policy (the warm-up iteration moves only the critic) scores the
  same at every evaluation: a learning curve shows the policy changing, not new games."""
  learner, _, states, _ = run
  evaluate = fast_jit(learner.evaluate)
  first = evaluate(states[0][0], jax.random.key(1))
  for state, key in ((states[0][0], jax.random.key(2)), (states[0][1], jax.random.key(3))):
    for name, value in evaluate(state, key).items():
      np.testing.assert_array_equal(value, first[name])
  assert 0.0 <= float(first["eval_return"]) <= 1.0


@pytest.mark.bitwise
def test_init_from_a_separately_computed_warm_start_is_the_same_state(warm_start, run):
  """`init(key, warm_start_policy_params(key, config))` equals `init(key)` bit for bit (the hook
  that lets the BC start run as its own program). Compiled with the bitwise options: at the
  fast ones the BC steps of two different programs may round a last bit differently, and Adam
  carries that into the parameters (`tests/same_numbers.py`)."""
  config, key, learner = warm_start["config"], warm_start["key"], warm_start["learner"]
  policy_params = jax.jit(lambda k: tc.warm_start_policy_params(k, config))(key)
  whole, split = jax.jit(lambda k, p: (learner.init(k), learner.init(k, p)))(key, policy_params)
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(split), strict=True):
    np.testing.assert_array_equal(as_numpy(a), as_numpy(b))
  # The BC steps moved the policy away from its random start (the `run` fixture's policy: no
  # BC, the same key and network).
  assert _abs_diff(warm_start["policy_params"], run[2][0][0].agent.policy_params) > 0.0


def test_critic_pretraining_fills_the_buffer_and_moves_only_the_critic(warm_start):
  """`critic_pretrain_steps` > 0: the run starts with the warm-start transitions in the buffer
  and a critic trained on them; the policy is the BC start either way (the separately computed
  one, passed to both inits)."""
  plain, pretrained = warm_start["split"], warm_start["pretrained"]
  config = pretrain_config()
  assert int(plain.buffer.size) == 0
  assert int(pretrained.buffer.size) == config.bc_dataset_episodes * TINY_GAME["max_turns"]
  assert _abs_diff(pretrained.agent.critic_params, plain.agent.critic_params) > 0.0
  assert _abs_diff(pretrained.agent.policy_params, plain.agent.policy_params) == 0.0
  env, env_params = envs.make("TokenGame-v0", **TINY_GAME)
  agent_key = jax.random.split(warm_start["key"], 3)[0]
  expected = fast_jit(
    lambda k: tc.warm_start_transitions(tc.bc_key_of(k), env, env_params, config)
  )(agent_key)
  np.testing.assert_array_equal(_replayed(pretrained).utterance, expected.utterance)


def test_q_gap_gate_keeps_the_actor_still_until_the_critic_separates_outcomes(warm_start, run):
  """With `warmup_q_gap` out of reach in two iterations the actor never trains
  (`actor_trained` 0, policy unchanged; the learner of `pretrain_config`, from its init); with a
  gate of 0 (the `run` fixture's config) it trains after `warmup_iters`."""
  state = warm_start["pretrained"]
  assert not bool(state.critic_ready)
  step = fast_jit(warm_start["pretrain_learner"].step)
  trained = []
  for _ in range(2):
    state, metrics = step(state)
    trained.append(float(metrics["actor_trained"]))
  assert trained == [0.0, 0.0]
  assert _abs_diff(state.agent.policy_params, warm_start["pretrained"].agent.policy_params) == 0.0
  _, _, states, open_gate = run
  assert [float(m["actor_trained"]) for m in open_gate[0]] == [0.0, 1.0]
  assert _abs_diff(states[0][-1].agent.policy_params, states[0][0].agent.policy_params) > 0.0


def test_fresh_q_gap_scores_new_games_before_the_critic_trains_on_them(run):
  """`q_gap_fresh` of iteration 1 is the outcome gap of the pre-iteration critic's min-Q on the
  transitions that iteration added (the first in the buffer); the running mean starts at 0 and
  moves by (1 - FRESH_GAP_DECAY) towards each iteration's gap."""
  _, _, states, metrics = run
  before, after, later = states[0]
  new = _replayed(after)
  expected = fast_jit(lambda a, b: tc.outcome_means(tc.min_q(a, b), b, 0.0)["q_gap"])(
    before.agent, new
  )
  np.testing.assert_allclose(metrics[0][0]["q_gap_fresh"], expected, rtol=1e-5, atol=1e-6)
  decay = archer.FRESH_GAP_DECAY
  np.testing.assert_allclose(after.fresh_q_gap, (1 - decay) * expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
    later.fresh_q_gap,
    decay * after.fresh_q_gap + (1 - decay) * metrics[0][1]["q_gap_fresh"],
    rtol=1e-5,
    atol=1e-6,
  )


def test_fresh_q_gap_gate_keeps_the_actor_still_until_it_passes(warm_start):
  """`warmup_fresh_q_gap` out of reach (the `warm_start` learner, from its init): no actor step
  in two iterations, policy unchanged."""
  state = start = warm_start["split"]
  assert not bool(state.critic_ready)
  step = fast_jit(warm_start["learner"].step)
  for _ in range(2):
    state, metrics = step(state)
    assert float(metrics["actor_trained"]) == 0.0
  assert _abs_diff(state.agent.policy_params, start.agent.policy_params) == 0.0
  assert not bool(state.critic_ready)


def test_make_train_traces_a_whole_run():
  """The whole run as one program (traced, not compiled: the Learner step is run above)."""
  config = tiny_config(bc_steps=3)
  state, metrics = jax.eval_shape(archer.make_train(config), jax.random.key(0))
  assert metrics["critic_loss"].shape == (3,)
  assert metrics["episode_return_sum"].shape == (3,)
  assert state.buffer.storage.dialogue.shape[0] == config.buffer_size


def test_sample_mean_baseline_centres_the_critic_q_over_the_samples_of_a_dialogue(run):
  """`actor_baseline_samples` = 2: the first B / 2 dialogues each get 2 utterances, and each
  one's advantage is min-Q minus the mean min-Q of its dialogue's 2 samples, so the two
  advantages of a dialogue sum to 0 (with the raw advantage) and differ where the samples do."""
  _, env_params, states, _ = run
  agent, items = states[0][1].agent, _replayed(states[0][1])
  config = ml_collections.FrozenConfigDict(
    dict(
      agent.config.as_configdict().to_dict(),
      advantage_normalization="none",
      actor_baseline_samples=2,
    )
  )
  _, extras = fast_jit(
    lambda: archer.actor_objective(
      agent.policy_params,
      agent.critic_params,
      agent.critic,
      agent.policy,
      items.dialogue,
      jax.random.key(6),
      config,
      env_params.utterance_len,
    )
  )()
  advantage = np.asarray(extras.advantage, np.float64).reshape(2, -1)
  assert advantage.shape[1] == items.dialogue.shape[0] // 2
  np.testing.assert_allclose(advantage.sum(axis=0), 0.0, atol=1e-5)
  assert np.abs(advantage).max() > 0.0


def test_actor_baseline_samples_must_divide_the_batch():
  config = archer.get_config()
  config.batch_size = 6
  config.actor_baseline_samples = 4
  with pytest.raises(
    ConfigError, match="config.batch_size: expected a multiple of config.actor_baseline_samples"
  ):
    archer.validate_config(config)


def test_mean_over_samples_averages_the_sample_major_rows_of_each_dialogue():
  """Rows k * B + b are sample k of dialogue b: with K = 2, B = 3 the dialogue means are
  (1 + 4) / 2, (2 + 5) / 2, (3 + 6) / 2, for every leading (head) row."""
  values = jnp.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0]])
  np.testing.assert_allclose(hc.mean_over_samples(values, 2), [[2.5, 3.5, 4.5], [1.0, 1.0, 1.0]])


def test_critic_v_samples_regresses_v_on_the_mean_target_q_of_k_fresh_samples(run):
  """`critic_v_samples` = 3: the V target of dialogue b is the mean over its 3 samples of the
  target critic's Q_e(s_b, a_k), with the samples drawn as the critic objective draws them (the
  dialogues tiled sample-major, one key); K = 1 is the reference's single-sample target."""
  _, env_params, states, _ = run
  agent, items = states[0][1].agent, _replayed(states[0][1])
  key = jax.random.key(5)

  def v_target(target, samples):
    config = ml_collections.FrozenConfigDict(
      dict(agent.config.as_configdict().to_dict(), critic_v_samples=samples)
    )
    return archer.critic_objective(
      agent.critic_params,
      target,
      agent.policy_params,
      agent.critic,
      agent.policy,
      items,
      key,
      config,
    )[1].v_target

  def target_q(target, samples):
    dialogue = jnp.tile(items.dialogue, (samples, 1))
    utterance, _ = transformer.generate(
      agent.policy,
      agent.policy_params,
      dialogue,
      key,
      num_tokens=env_params.utterance_len,
      temperature=agent.config.temperature,
    )
    q = agent.critic.apply(
      target,
      dialogue,
      utterance,
      tc.token_mask(utterance),
      method=transformer.UtteranceCritic.q_values,
    )
    return q.reshape(q.shape[0], samples, -1)

  @fast_jit
  def targets_and_by_hand(critic_params):
    target = jax.tree.map(lambda x: 1.1 * x + 0.01, critic_params)
    return [(v_target(target, k), target_q(target, k)) for k in (3, 1)]

  (v_3, by_hand), (v_1, by_hand_1) = targets_and_by_hand(agent.critic_params)
  by_hand = np.asarray(by_hand)
  np.testing.assert_allclose(v_3, by_hand.mean(axis=1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(v_1, by_hand_1[:, 0], rtol=1e-5, atol=1e-6)
  assert np.abs(by_hand - by_hand.mean(axis=1, keepdims=True)).max() > 0.0  # samples differ
