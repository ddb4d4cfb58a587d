"""hrljax: a JAX functional reference implementation of hierarchical reinforcement learning.

The spine shared by every algorithm lives here (types, environments, rollouts, the device mesh,
checkpoints, logging, the training loop). The algorithms live in `hrljax.losses` (pure functions),
`hrljax.networks` (Flax modules) and `hrljax.agents` (train states, updates and whole runs).
"""

__version__ = "0.1.0"
