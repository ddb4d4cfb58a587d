"""Pure-function losses, one module per family.

Import the module you need, e.g. `from hrljax.losses import policy_gradient`. Modules import only
jax, chex, rlax and distrax: no network, agent, optimizer or environment.
"""
