"""Tests of experiments.plot_options: the option maps and the PNG drawn from a run's checkpoint."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import plot_options
from hrljax import envs, training
from hrljax.agents import option_critic as oc
from hrljax.envs import four_rooms


def tiny_config():
  config = oc.get_config()
  config.update(
    dict(
      num_envs=4,
      num_steps=4,
      n_step=4,
      total_timesteps=4 * 4 * 4,
      log_every=2,
      checkpoint_every=4,
      eval_episodes=4,
      transfer_after=32,
      rollout_unroll=1,
    )
  )
  config.env_kwargs.max_steps_in_episode = 20
  return config


def test_option_maps_read_the_network_at_every_free_cell():
  config = tiny_config()
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  agent = oc.OptionCriticAgent.create(jax.random.key(0), envs.spec(env, env_params), config)
  p = agent.params["params"]
  # Tabular heads on one-hot cells: Q prefers option 2 everywhere but option 1 in cell (1, 1);
  # option 0 terminates surely in cell (1, 1) and never in cell (3, 3).
  q = jnp.zeros_like(p["q_head"]["kernel"]).at[:, 2].set(1.0).at[1 * 13 + 1, 1].set(5.0)
  term = jnp.zeros_like(p["termination_head"]["kernel"])
  term = term.at[1 * 13 + 1, 0].set(50.0).at[3 * 13 + 3, 0].set(-50.0)
  agent = agent.replace(
    params={"params": {**p, "q_head": {"kernel": q}, "termination_head": {"kernel": term}}}
  )
  maps = plot_options.option_maps(agent, env, env_params)
  beta, greedy = maps["termination"], maps["greedy_option"]
  assert beta.shape == (4, 13, 13) and greedy.shape == (13, 13)
  free = np.zeros((13, 13), bool)
  free[tuple(four_rooms.free_cells().T)] = True
  assert np.isnan(beta[:, ~free]).all() and (greedy[~free] == -1).all()
  assert greedy[1, 1] == 1 and (np.delete(greedy[free], 0) == 2).all()  # (1, 1) is cell 0
  assert beta[0, 1, 1] == pytest.approx(1.0) and beta[0, 3, 3] == pytest.approx(0.0, abs=1e-6)
  np.testing.assert_allclose(beta[1:, free], 0.5)


def test_plot_workdir_draws_a_png_from_the_final_checkpoint(tmp_path):
  config = tiny_config()
  workdir = str(tmp_path / "run")
  training.train(oc.make_learner(config), config, workdir)
  out = plot_options.plot_workdir(workdir, str(tmp_path / "options.png"))
  with open(out, "rb") as f:
    data = f.read()
  assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_workdir_explains_what_is_missing(tmp_path):
  with pytest.raises(FileNotFoundError, match="no config.json"):
    plot_options.plot_workdir(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps({"agent": "ppo"}))
  with pytest.raises(ValueError, match="config.agent: expected 'option_critic'"):
    plot_options.plot_workdir(str(tmp_path))
