"""PointHazard layouts selectable from the command line, shared by the off-policy safety configs.

ml_collections passes the text after the config file's colon to `get_config`:

  python -m experiments.train --config=experiments/configs/bresa_pointhazard.py:random_hazards \
      --config.seeds=0,1,2 --workdir=runs/bresa_random

"default" is the fixed layout of `hrljax/envs/point_hazard.py` (start, central hazard and goal
collinear: the straight path crosses the hazard, the "detour problem" in
`experiments/results/SAFETY.md`). "random_hazards" samples every hazard centre at each reset
(`EnvParams.randomize_hazards`, rejection until start and goal are clear of every hazard), start
and goal stay fixed; the "relative" observation carries every hazard's relative position, so a
policy can see the sampled layout.
"""

# Fields of `envs.make("PointHazard-v0", ...)` each layout overrides; "default" overrides none,
# so a config built with it equals the config built without the argument.
LAYOUTS = {
  "default": {},
  "random_hazards": {"randomize_hazards": True},
}


def apply_layout(config, layout: str):
  """Sets `config.env_kwargs` for the PointHazard layout named `layout` and returns `config`.

  Raises ValueError naming the argument, the value and the choices for an unknown layout.
  """
  if layout not in LAYOUTS:
    raise ValueError(
      f"layout: unknown PointHazard layout {layout!r}; expected one of "
      f"{', '.join(sorted(LAYOUTS))} (config file argument, e.g. "
      "--config=experiments/configs/sac_pointhazard.py:random_hazards)"
    )
  for field, value in LAYOUTS[layout].items():
    config.env_kwargs[field] = value
  return config
