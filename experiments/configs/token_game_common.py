"""The common protocol of every token-game agent (ArCHer and its baselines): game, policy, warm start.

`game_config(config)` sets, on any config built with `hrljax.agents.token_bc.add_config_fields`,
the fields that must be equal for a comparison to mean something:

* the game (`env_kwargs`): 8 items with 3 binary attributes, utterances of 4 tokens, 4 turns.
  A perfect questioner needs exactly 3 questions and a guess, so every redundant question costs
  the game a coin flip or worse; the default rewards (1 for a correct guess, 0 otherwise) make
  every return a success indicator;
* the token policy's size (`d_model`, `num_layers`, `num_heads`) and sampling temperature;
* the behaviour-cloned warm start (`bc_*`): every agent with the same seed starts from the same
  policy (`token_bc.pretrained_policy_params` folds the same stream into the init key);
* evaluation: greedy decoding over `eval_episodes` games (success rate = `eval_return`).

Environment interactions are counted in utterances (one env step = one utterance).
Why this game: on the 16-item, 4-attribute, 6-turn game a 2-layer, d_model 64 policy cloned for
4000 BC steps still guessed at chance (greedy success 13%, scripted teacher 84%): it learns to
ask questions but not to map four answers to an item, and neither ArCHer's critic nor its actor
can learn that mapping faster from a 0/1 reward. On this game 2000 BC steps give a policy that
succeeds about 60% of the time (greedy), below its teacher and far below a perfect questioner
(100%), so there is room to improve. Numbers and commands in
`experiments/configs/archer_token_game.py`.
"""

import ml_collections

GAME = dict(num_items=8, num_attributes=3, num_values=2, utterance_len=4, max_turns=4)


def game_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Sets the common game, policy, warm-start and evaluation fields on `config` (in place; also
  returned)."""
  config.env_name = "TokenGame-v0"
  config.env_kwargs = ml_collections.ConfigDict(dict(GAME))
  config.d_model = 64
  config.num_layers = 2
  config.num_heads = 4
  config.temperature = 1.0
  config.bc_steps = 2000
  config.bc_batch_size = 64
  config.bc_learning_rate = 1e-3
  config.bc_dataset_episodes = 256
  config.bc_random_question_prob = 0.5
  config.eval_episodes = 256
  return config
