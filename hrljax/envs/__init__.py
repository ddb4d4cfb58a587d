"""Environments hrljax owns, all with the gymnax functional API, plus wrappers."""
