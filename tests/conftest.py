"""Test-wide JAX settings: implicit rank promotion is an error, as DESIGN.md asks."""

import jax

jax.config.update("jax_numpy_rank_promotion", "raise")
