"""The tiny PPO CartPole command line shared by the tests that train through the driver (in a
subprocess, in process, from an installed wheel): the same programs every time, so the persistent
compilation cache compiles them once per test run."""

# 16 updates of 4 envs x 32 steps, logged every 4, checkpointed at 8 and 16.
TINY_PPO_OVERRIDES = (
  "--config.total_timesteps=2048",
  "--config.num_steps=32",
  "--config.update_epochs=2",
  "--config.num_minibatches=2",
  "--config.log_every=4",
  "--config.checkpoint_every=8",
  "--config.eval_episodes=4",
)
