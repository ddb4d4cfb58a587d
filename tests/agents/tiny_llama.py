"""The tiny randomly initialised Llama, with SmolLM2's tokenizer, of the language-model agent
tests: one layer of width 16, LoRA rank 2, so that compiling its programs is cheap."""

import dataclasses

import jax

from hrljax import llm_weights
from hrljax.agents import llm_common
from hrljax.networks import llama

TINY = llama.LlamaConfig(
  vocab_size=49152,
  dim=16,
  num_layers=1,
  num_heads=2,
  num_kv_heads=1,
  hidden_dim=32,
  max_seq_len=512,
  lora_rank=2,
  lora_alpha=4.0,
)


def tiny_language_model(max_seq_len: int = TINY.max_seq_len) -> llm_common.LanguageModel:
  """`TINY` (with `max_seq_len`) initialised from `key(0)`, with SmolLM2's tokenizer."""
  config = dataclasses.replace(TINY, max_seq_len=max_seq_len)
  params = llama.init_params(config, jax.random.key(0))
  return llm_common.LanguageModel(
    config, params, llm_weights.load_tokenizer(), llm_weights.EOS_ID, llm_weights.PAD_ID
  )


# The text token game's prompts hold dialogues of several turns: a longer context.
TINY_GAME = dataclasses.replace(TINY, max_seq_len=1024)


def tiny_game_model() -> llm_common.LanguageModel:
  """`tiny_language_model` with `TINY_GAME`'s context (the text-game agents' tests)."""
  return tiny_language_model(TINY_GAME.max_seq_len)
