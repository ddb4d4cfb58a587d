"""Flax Linen modules: torsos, heads, ensembles. No network knows which loss will use it."""
