# ViT Families. `make help` lists the targets; every target bootstraps .venv (and the data) first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

# exp-datascale axes; empty = the spec's profile (experiments/datascale/spec.yaml)
PROFILE ?=
FAMILIES ?=
FRACTIONS ?=
SEEDS ?=
BUDGET ?=
DATASET ?=
VARIANTS ?=
STAGE ?=
EXPERIMENTS ?=
PARTS ?=
ABLATIONS ?=
JOBS ?=
PACK ?=
# the offline install (make wheelhouse, make install WHEELS=): the folder, and the Python it is for
WHEELS ?=
PY_VERSION ?=
# the launcher of exp-datascale, exp-distill and exp-inductive-bias (experiments/runs/sweep/slurm.py):
# local (default), slurm or submitit-local; PARTITION= ACCOUNT= GPUS= CPUS= MEM_GB= TIME_MIN=
# ARRAY_PARALLELISM= RETRIES= override the profile's cluster: mapping; NO_WAIT=1 returns at once
LAUNCHER ?=
PARTITION ?=
ACCOUNT ?=
GPUS ?=
CPUS ?=
MEM_GB ?=
TIME_MIN ?=
ARRAY_PARALLELISM ?=
RETRIES ?=
NO_WAIT ?=
# A value reaches a command as the shell's expansion of its exported variable ($$SEEDS), never as
# command text: SEEDS='0; rm x' is two words for the runner to refuse, not a second command.
export PROFILE FAMILIES FRACTIONS SEEDS BUDGET DATASET VARIANTS STAGE PARTS ABLATIONS JOBS PACK EXPERIMENTS EPOCHS \
	WHEELS PY_VERSION \
	LAUNCHER PARTITION ACCOUNT GPUS CPUS MEM_GB TIME_MIN ARRAY_PARALLELISM RETRIES
LAUNCH_ARGS = $(if $(LAUNCHER),--launcher $$LAUNCHER) $(if $(PARTITION),--partition $$PARTITION) \
	$(if $(ACCOUNT),--account $$ACCOUNT) $(if $(GPUS),--gpus $$GPUS) $(if $(CPUS),--cpus $$CPUS) \
	$(if $(MEM_GB),--mem_gb $$MEM_GB) $(if $(TIME_MIN),--time_min $$TIME_MIN) \
	$(if $(ARRAY_PARALLELISM),--array_parallelism $$ARRAY_PARALLELISM) $(if $(RETRIES),--retries $$RETRIES) \
	$(if $(NO_WAIT),--no_wait)
# each variable's option on an experiment's command line (VARIABLE:option; LAUNCHER: LAUNCH_ARGS);
# a spec's make_options names those its runner takes, in their order
OPTIONS := PROFILE:profile FAMILIES:families FRACTIONS:fractions SEEDS:seeds BUDGET:budget DATASET:dataset \
	VARIANTS:variants STAGE:stage PACK:pack JOBS:jobs ABLATIONS:ablations PARTS:parts
option = $(foreach o,$(filter $(1):%,$(OPTIONS)),$(if $($(1)),--$(patsubst $(1):%,%,$(o)) $$$(1)))
options = $(foreach v,$(1),$(if $(filter LAUNCHER,$(v)),$(LAUNCH_ARGS),$(call option,$(v))))
SWEEP_ARGS = $(call options,PROFILE FAMILIES FRACTIONS SEEDS BUDGET DATASET VARIANTS STAGE PACK JOBS LAUNCHER)

# The experiments: each folder experiments/<name>/ with a spec.yaml, run by `make exp-<name>` (its
# underscores as dashes). A spec declares, each on a line of its own (read here with sed, never run):
# `runner:` its runner, `python -m experiments <runner>` (none: the sweep); `make_options:` the
# variables its command takes, in order; `order:` its place in exp-all; `make_help:` its `make help` line.
comma := ,
spec_line = $(shell sed -n 's/^$(2): *$(3).*/\1/p' experiments/$(1)/spec.yaml 2>/dev/null)
runner_of = $(or $(call spec_line,$(1),runner,\([a-z0-9_]*\)),sweep)
options_of = $(subst $(comma), ,$(call spec_line,$(1),make_options,\[\([A-Z_$(comma) ]*\)\]))
EXP = $(subst -,_,$*)
# the sweep's `sweep --spec NAME`; a runner's own name, with --spec where it runs another's spec
command_of = $(if $(filter sweep,$(2)),sweep --spec $(1),$(2)$(if $(filter-out $(1),$(2)), --spec $(1)))
SPECS := $(shell for n in $(patsubst experiments/%/spec.yaml,%,$(wildcard experiments/*/spec.yaml)); do \
	o=$$(sed -n 's/^order: *\([0-9]*\).*/\1/p' experiments/$$n/spec.yaml); echo "$${o:-999999} $$n"; \
	done | sort -k1,1n -k2,2 | cut -d' ' -f2)
# fit-families
EPOCHS ?= 5
# from the family table (modules/budgets.py), teachers first; read when fit-families runs, after install
FAMILY_ORDER = $(shell $(PY) -m experiments families --names)

.DEFAULT_GOAL := help
.PHONY: help install data wheelhouse wheels-folder offline-install-check test training-digests exp-all exp-datascale-commands tables tensorboard families \
	fit-families bench bench-levers bench-profile bench-stage bench-packed-cpu bench-steps gpu-check safety reference clean-venv

# each description wrapped under its target's column, so that the list fits in 100 columns
help: ## list the targets
	@grep -E '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | while IFS= read -r line; do \
	  if [ "$${line%%:*}" != 'exp-%' ]; then printf '%s\n' "$$line"; else for n in $(SPECS); do \
	    printf 'exp-%s:## %s\n' "$$(echo $$n | tr _ -)" "$$(sed -n 's/^make_help: *"\(.*\)".*/\1/p' experiments/$$n/spec.yaml)"; \
	  done; fi; done | awk -F':.*## ' '{ \
	  line = sprintf("  %-24s", $$1); n = split($$2, words, " "); \
	  for (i = 1; i <= n; i++) { \
	    if (length(line) + 1 + length(words[i]) > 100 && length(line) > 27) { print line; line = sprintf("%27s", "") } \
	    line = line " " words[i] } \
	  print line }'

ifeq ($(WHEELS),)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

data: ## Fashion-MNIST from Debian's dataset-fashion-mnist (without apt, the hub copy is tried)
	@if [ -f $(FMNIST) ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null \
	  || echo "warning: apt-get install dataset-fashion-mnist failed; the hub copy will be tried"; \
	else echo "note: no $(FMNIST) and no root apt-get; the hub copy will be tried"; fi
else
# offline, from `make wheelhouse`: .venv sees $(PYTHON)'s own packages (its torch) and pip reaches
# no index; the data go where the suite reads them ($$FASHION_MNIST_DIR, else Debian's folder)
$(STAMP): pyproject.toml | wheels-folder
	$(PYTHON) tools/wheelhouse.py venv $(VENV)
	PIP_NO_INDEX=1 $(VENV)/bin/pip install -q --no-index --find-links "$$WHEELS" -e '.[test]'
	touch $(STAMP)

data: | wheels-folder
	@dest=$${FASHION_MNIST_DIR:-$(dir $(FMNIST))}; \
	if [ -f "$$dest/train-images-idx3-ubyte.gz" ]; then :; \
	elif mkdir -p "$$dest" 2>/dev/null && cp "$$WHEELS"/fashion-mnist/*.gz "$$dest"/; then echo "Fashion-MNIST -> $$dest"; \
	else echo "note: $$dest is not writable: export FASHION_MNIST_DIR=$$(cd "$$WHEELS" && pwd)/fashion-mnist"; fi
endif

wheels-folder:
	@[ -d "$$WHEELS/fashion-mnist" ] || { echo "error: WHEELS=$$WHEELS is no folder of 'make wheelhouse' (no fashion-mnist/ in it)" >&2; exit 2; }

install: $(STAMP) data ## create .venv with the project and its packages (and the data); WHEELS=<folder> PYTHON=<a python with torch>: offline, from make wheelhouse, the .venv seeing that python's torch

offline-install-check: install ## (developers) build a wheelhouse, then install from it with no network into a Python that has only torch, and run the project (tests/test_offline_install.py; downloads; about 9 min)
	OFFLINE_INSTALL_CHECK=1 $(PY) -m pytest -n 0 tests/test_offline_install.py

wheelhouse: ## WHEELS=<folder>: every wheel the suite needs beyond torch and torchvision, and the data, for make install WHEELS= on a machine without network (PY_VERSION=3.12: for another Python)
	@[ -n "$$WHEELS" ] || { echo "error: make wheelhouse needs WHEELS=<folder>" >&2; exit 2; }
	$(PYTHON) tools/wheelhouse.py build "$$WHEELS" $(if $(PY_VERSION),--python-version "$$PY_VERSION")

# Python caches the project's bytecode even where the environment says not to: the suite starts
# ~50 processes, and each would otherwise compile the project's modules again (~1 s of CPU each)
test: install ## ruff (errors, not style: pyproject.toml), then the test suite (offline, a few minutes on 2 cores)
	$(VENV)/bin/ruff check datamodules modules experiments benchmarks tests tools
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest

training-digests: install ## record what each family's training computes on this machine (tests/training_digests/): after a change to training and the reruns it calls for
	TRAINING_DIGESTS=write PYTHONDONTWRITEBYTECODE= $(PY) -m pytest tests/test_training.py \
	  -k "every_family_fits or cli_with_a_teacher"

exp-%: install ## every experiment of experiments/*/spec.yaml (`make help` lists each from its spec), then its tables
	$(if $(and $(filter 1,$(words $*)),$(if $(findstring %,$*),,ok),$(filter $(EXP),$(SPECS))),,$(error unknown target exp-$*: allowed $(subst _,-,$(addprefix exp-,$(SPECS))) or exp-all))$(PY) -m experiments $(call command_of,$(EXP),$(call runner_of,$(EXP))) $(call options,$(call options_of,$(EXP))) || failed=1; \
	$(PY) -m experiments tables --experiment $(EXP); exit $${failed:-0}

exp-all: install ## the experiments' cpu profiles in their specs' order, a dependency order (exp-datascale's ResNet and ViT runs are exp-distill's teachers and exp-inductive-bias's family runs, trained once), then every table; prints each one's minutes
	@failed=0; all=$$(date +%s); \
	for t in $(subst _,-,$(addprefix exp-,$(SPECS))); do \
	  s=$$(date +%s); $(MAKE) --no-print-directory $$t || failed=1; \
	  echo "== $$t: $$(( ($$(date +%s) - s + 30) / 60 )) min"; \
	done; \
	echo "== exp-all: $$(( ($$(date +%s) - all + 30) / 60 )) min$$( [ $$failed = 0 ] || echo ', some runs failed (see above)')"; \
	exit $$failed

exp-datascale-commands: install ## print each run's exact command (the main stage's once its lr tuning is done; before that their count) and each stage's estimated wall time on this device (from the measured step times: results/step_times.csv, else make bench-steps); runs nothing
	$(PY) -m experiments sweep --dry_run --spec datascale $(SWEEP_ARGS)

tables: install ## regenerate results/*.csv, *.md and *.png, results/step_times.csv and the README's Findings from the run folders alone: yours in results/runs, else the committed results/reference
	$(PY) -m experiments tables

reference: install ## (developers) copy the records of your runs in results/runs over the committed results/reference, then rebuild the tables from it
	$(PY) -m experiments reference $(if $(EXPERIMENTS),--experiment $$EXPERIMENTS)
	$(PY) -m experiments tables --runs_dir results/reference

tensorboard: install ## serve the curves of every run in results/runs
	$(VENV)/bin/tensorboard --logdir results/runs --bind_all

families: install ## the family x budget table: parameters and FLOPs at 28x28x1 and 32x32x3
	$(PY) -m experiments families --image_size 28 --in_chans 1
	$(PY) -m experiments families --image_size 32 --in_chans 3

fit-families: install ## fit every family on full Fashion-MNIST (BUDGET=tiny EPOCHS=5 FAMILIES=... SEEDS="0 1 2", default 0; DeiT distils from the ResNet of its seed)
	@b=$${BUDGET:-tiny}; for s in $${SEEDS:-0}; do \
	  args="--experiment fit-families --model.budget $$b --trainer.max_epochs $$EPOCHS --seed_everything $$s --data.seed $$s"; \
	  for f in $${FAMILIES:-$(FAMILY_ORDER)}; do \
	    extra=""; if [ $$f = deit ]; then \
	      teacher=$$($(PY) -m experiments run_dir $$args --model.family resnet) || exit 1; \
	      extra="--model.teacher_checkpoint $$teacher/checkpoints/best.ckpt"; fi; \
	    echo "== $$f, seed $$s"; $(PY) -m experiments fit $$args --model.family $$f $$extra || exit 1; \
	  done; \
	done

gpu-check: install ## the GPU acceptance run of the packed engine, at most 8 min by its own clock, each part under a hard limit (not yet run on a GPU; WHEELS=<folder>: installed offline): one packed group of the gpu profile trained and tested, compile and step times per family at 8/6/4 members (what the dry run reads), host syncs, one fit (-> results/gpu_check.json; its --smoke runs in make test)
	$(PY) benchmarks/gpu_check.py

bench-levers: install ## the CPU speed levers per family against what the cpu profiles train (one run per core, batch 32, bf16 where native): batch 64/128, the other precision, depthwise convs in bf16 (ConvNeXt keeps them in fp32), channels_last, torch.compile, validation's share (-> results/cpu_levers.txt)
	set -o pipefail; $(PY) benchmarks/cpu_levers.py | tee results/cpu_levers.txt

bench-profile: install ## where one training step of each family spends its time on this CPU, by kind of operator (matmul, convolution, normalisation, softmax, copies and casts, ...) and the largest operators (torch.profiler, one thread, batch 32; -> results/step_profile.txt)
	set -o pipefail; $(PY) benchmarks/step_profile.py | tee results/step_profile.txt

bench-stage: install ## the packed engine on a miniature gpu stage: compilations and time when a stage's groups share one compiled step against compiling each group again (inductor, on this machine; -> results/packed_stage.txt)
	set -o pipefail; $(PY) benchmarks/packed_stage.py | tee results/packed_stage.txt

bench-packed-cpu: install ## the gpu profile's packed steps as the engine runs them on this CPU: eager, one thread a run (the default jobs), 3 steps per family but DeiT (no teacher inside) at 8/6/4 members x batch 128, minutes on 2 cores: its seconds are in the file (-> results/packed_steps_cpu.json: the gpu profile's dry run here prices its groups from them)
	OMP_NUM_THREADS=1 $(PY) benchmarks/gpu_check.py --device cpu --mode eager --parts compile --steps 3 \
	  --families resnet vit swin convnext hybrid --part_limit 3000 --total_limit 3600

bench-steps: install ## one training step of each family on this machine as a sweep trains a run (batch 32, JOBS= processes at once, default one per core; DeiT with its teacher), for the dry run's estimate where no record measured one (a machine the reference never ran on; -> results/step_times_bench.json, a section per machine, with its seconds)
	$(PY) benchmarks/step_times.py $(if $(JOBS),--jobs $$JOBS)

bench: install ## benchmarks: DataModule loader vs per-sample DataLoader; LightningModule vs plain loop; images/s and MFU per family, single vs packed K=4; one run on every thread vs one run per thread; eager vs torch.compile (-> results/benchmarks.txt)
	set -o pipefail; { $(PY) benchmarks/datamodule_throughput.py && $(PY) benchmarks/module_overhead.py \
	  && $(PY) benchmarks/family_throughput.py && $(PY) benchmarks/process_parallelism.py \
	  && $(PY) benchmarks/compiled_step.py; } | tee results/benchmarks.txt
	$(PY) -c 'from pathlib import Path; from experiments.report.readme import update_block as u; \
	  u(Path("docs/benchmarks.md"), "benchmarks", "```\n" + Path("results/benchmarks.txt").read_text() + "```")'

safety: install ## the bad-input battery against the real CLI, one process per case: exit code, stderr lines, traceback, files left, planted code run (-> results/safety.md)
	set -o pipefail; $(PY) tests/safety_battery.py | tee results/safety.md

clean-venv: ## remove .venv
	rm -rf $(VENV)
