# make run  : build .venv if missing, then the main experiment.
# make test : build .venv if missing, then the test suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test venv bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m experiments.train --config=experiments/configs/ppo_cartpole.py --workdir=runs/ppo_cartpole
	$(PY) -m experiments.plot runs/ppo_cartpole --out=runs/ppo_cartpole/curve.png

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m experiments.benchmarks.throughput --config=experiments/configs/ppo_cartpole.py

clean:
	rm -rf $(VENV) runs .pytest_cache
