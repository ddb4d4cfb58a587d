"""Tests of experiments/diagnostics/archer_critic.py: the exact Q* of final utterances and the
outcome gap, against values computed by hand from the game's item table."""

import jax.numpy as jnp
import pytest
import numpy as np

from experiments.diagnostics import archer_critic as diag
from experiments.configs import token_game_common
from hrljax.agents import archer
from hrljax.agents import token_common as tc
from hrljax.envs import token_game

PARAMS = token_game.make_params(**token_game_common.GAME)


def _dialogue_after_one_question(attribute: int, value: int, yes: bool) -> np.ndarray:
  dialogue = np.zeros((token_game.max_dialogue_len(PARAMS),), np.int32)
  question = np.asarray(token_game.encode_question(attribute, value, PARAMS))[:4]
  turn = [token_game.BOS, *question, token_game.YES if yes else token_game.NO]
  dialogue[: len(turn)] = turn
  return dialogue


def test_oracle_q_is_one_over_the_consistent_items_for_a_consistent_guess():
  table = token_game.item_attributes(PARAMS)
  dialogue = _dialogue_after_one_question(0, 0, yes=True)
  consistent = np.flatnonzero(table[:, 0] == 0)  # items whose attribute 0 has value 0
  inconsistent = np.flatnonzero(table[:, 0] != 0)
  question = np.asarray(token_game.encode_question(1, 0, PARAMS))
  utterances = np.stack(
    [
      np.asarray(token_game.encode_guess(consistent[0], PARAMS)),
      np.asarray(token_game.encode_guess(inconsistent[0], PARAMS)),
      question,
    ]
  )
  batch = tc.UtteranceTransition(
    dialogue=jnp.asarray(np.stack([dialogue] * 3)),
    utterance=jnp.asarray(utterances),
    reward=jnp.asarray([1.0, 0.0, 0.0]),
    next_dialogue=jnp.asarray(np.stack([dialogue] * 3)),
    terminated=jnp.asarray([True, True, True]),
  )
  q, decided = diag.oracle_q(batch, PARAMS)
  np.testing.assert_allclose(q, [1.0 / len(consistent), 0.0, 0.0])
  # The guesses end the game whatever the target; the question, on the second of four turns,
  # does not.
  np.testing.assert_array_equal(decided, [True, True, False])
  # Gap: mean over the success (row 0) minus mean over the decided failure (row 1).
  gap = float(diag.outcome_gap(jnp.asarray([0.9, 0.2, 0.4]), batch, decided, 0.0))
  np.testing.assert_allclose(gap, 0.9 - 0.2, rtol=1e-6)


def test_oracle_q_under_the_twenty_questions_rules_is_exact_only_where_the_game_surely_ends():
  """A win earns 0, every other turn -1, a wrong guess continues: a guess among several items
  is undecided; on the last turn every utterance ends the game, worth -1 + P(win)."""
  params = token_game.make_params(
    **{**token_game_common.GAME, **token_game.TWENTY_QUESTIONS_RULES, "max_turns": 2}
  )
  table = token_game.item_attributes(params)
  dialogue = np.zeros((token_game.max_dialogue_len(params),), np.int32)
  question = np.asarray(token_game.encode_question(0, 0, params))[:4]
  dialogue[:6] = [token_game.BOS, *question, token_game.YES]  # one turn played, the last is next
  consistent = np.flatnonzero(table[:, 0] == 0)
  inconsistent = np.flatnonzero(table[:, 0] != 0)
  utterances = np.stack(
    [
      np.asarray(token_game.encode_guess(consistent[0], params)),
      np.asarray(token_game.encode_guess(inconsistent[0], params)),
      np.asarray(token_game.encode_question(1, 0, params)),
    ]
  )
  last_turn = tc.UtteranceTransition(
    dialogue=jnp.asarray(np.stack([dialogue] * 3)),
    utterance=jnp.asarray(utterances),
    reward=jnp.asarray([0.0, -1.0, -1.0]),
    next_dialogue=jnp.asarray(np.stack([dialogue] * 3)),
    terminated=jnp.asarray([True, True, True]),
  )
  q, decided = diag.oracle_q(last_turn, params)
  np.testing.assert_allclose(q, [-1.0 + 1.0 / len(consistent), -1.0, -1.0], rtol=1e-6)
  np.testing.assert_array_equal(decided, [True, True, True])
  gap = float(diag.outcome_gap(jnp.asarray([-0.1, -0.8, -1.2]), last_turn, decided, -1.0))
  np.testing.assert_allclose(gap, -0.1 - (-1.0), rtol=1e-6)
  # The same guesses on the first turn: the game goes on after a wrong one.
  first_turn = last_turn._replace(dialogue=jnp.zeros_like(last_turn.dialogue).at[:, 0].set(1))
  _, decided = diag.oracle_q(first_turn, params)
  np.testing.assert_array_equal(decided, [False, False, False])


def test_training_buffer_adds_the_seed_bc_dataset_after_the_policy_data():
  """`--warm_start_data`: the training buffer ends with the seed's BC dataset (with rewards), the
  transitions a run with `critic_pretrain_steps` starts from."""
  import jax
  import ml_collections
  from hrljax import envs

  config = archer.get_config()
  config.env_kwargs = ml_collections.ConfigDict(dict(num_items=4, num_attributes=2, max_turns=3))
  config.update(
    dict(d_model=16, num_layers=1, num_heads=2, num_envs=4, num_steps=3, bc_dataset_episodes=4)
  )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  policy = tc.make_policy(env_params, config)
  params = tc.init_policy_params(jax.random.key(0), policy, env_params)
  seed_key, key = jax.random.key(7), jax.random.key(8)
  both = diag.training_buffer(config, params, key, seed_key, 1, True)
  policy_only = diag.training_buffer(config, params, key, seed_key, 1, False)
  bc_only = diag.training_buffer(config, params, key, seed_key, 0, True)
  expected = jax.jit(lambda k: tc.warm_start_transitions(k, env, env_params, config))(
    tc.bc_key_of(jax.random.split(seed_key, 3)[0])
  )
  assert policy_only.utterance.shape[0] == 4 * 3
  assert bc_only.utterance.shape[0] == 4 * 3  # 4 episodes x max_turns 3
  np.testing.assert_array_equal(bc_only.utterance, expected.utterance)
  np.testing.assert_array_equal(bc_only.reward, expected.reward)
  np.testing.assert_array_equal(
    both.utterance, np.concatenate([policy_only.utterance, expected.utterance])
  )


def test_advantage_agreement_against_hand_values():
  # Two dialogues x 2 samples; only dialogue 0 is on the last turn.
  exact = jnp.asarray([[0.5, 0.3], [-0.5, -0.3]])  # [K, B]
  last_turn = jnp.asarray([True, False])
  same = diag.advantage_agreement(exact * 2.0 + 1.0, exact, last_turn)
  np.testing.assert_allclose(float(same["adv_corr"]), 1.0, rtol=1e-5)
  np.testing.assert_allclose(float(same["adv_sign_centred"]), 1.0)
  # A critic that ranks dialogue 0's samples the wrong way: correlation -1, no sign agrees,
  # whatever it says about dialogue 1 (not on the last turn, so not counted).
  wrong = diag.advantage_agreement(jnp.asarray([[0.1, 9.0], [0.7, -9.0]]), exact, last_turn)
  np.testing.assert_allclose(float(wrong["adv_corr"]), -1.0, rtol=1e-5)
  np.testing.assert_allclose(float(wrong["adv_corr_centred"]), -1.0, rtol=1e-5)
  np.testing.assert_allclose(float(wrong["adv_sign_centred"]), 0.0)


@pytest.mark.parametrize("rules", ["default", "twenty_questions"])
def test_critic_report_gives_every_number_of_a_curve_point(rules, monkeypatch):
  """The report of one evaluation (buffers collected by the policy, the oracle, the critic's
  numbers and the advantage agreement) under either rules, traced, not compiled; under the
  Twenty Questions rules with the agreement's samples drawn in chunks (4 of 3 dialogues)."""
  import jax
  import ml_collections
  from hrljax import envs

  game = dict(num_items=4, num_attributes=2, max_turns=3)
  if rules == "twenty_questions":
    game.update(token_game.TWENTY_QUESTIONS_RULES)
    monkeypatch.setattr(diag, "AGREEMENT_TOKENS", 1)
  config = archer.get_config()
  config.env_kwargs = ml_collections.ConfigDict(game)
  config.update(
    dict(
      d_model=16,
      num_layers=1,
      num_heads=2,
      critic_d_model=16,
      critic_num_layers=1,
      num_envs=4,
      num_steps=3,
      bc_steps=0,
    )
  )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)

  def report(key):
    agent = archer.ArcherAgent.create(key, env, env_params, config)
    buffer = diag.collect(config, agent.policy_params, key, 1)
    oracle = diag.oracle_q(buffer, env_params)
    return diag.critic_report(agent, buffer, buffer, oracle, oracle, env_params, key)

  out = jax.eval_shape(report, jax.random.key(0))
  assert set(out) == {
    "adv_corr",
    "adv_corr_centred",
    "adv_sign_centred",
    "q_gap_train",
    "q_gap_held_out",
    "oracle_gap_train",
    "oracle_gap_held_out",
    "final_error",
  }
  assert all(value.shape == () for value in out.values())
