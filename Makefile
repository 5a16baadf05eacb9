# Two entry points for a fresh machine (python3 >= 3.11 and make): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
BENCHSTAMP := $(VENV)/.installed-bench

.PHONY: demo test bench install dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEVSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(STAMP)

# the benchmarks' extra: dask-jobqueue for the Slurm recipe's test (tests/test_slurm.py)
$(BENCHSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,slurm]'
	touch $@ $(DEVSTAMP) $(STAMP)

install: $(STAMP)
dev: $(DEVSTAMP)

# The main job on the embedded default: a local Dask cluster and the bundled CASC Census file.
demo: $(STAMP)
	$(BIN)/microagg anonymize example:census demo-release --k 5 --method mdav

# The project's bytecode written first: where PYTHONDONTWRITEBYTECODE is set (as on this machine), every
# process the suite starts (each command, each Dask worker) compiled the sources again, 0.4 s of a core.
# Two pytest processes (pytest-xdist): most tests wait on a subprocess, a cluster's start or an import.
test: $(DEVSTAMP)
	$(BIN)/python -m compileall -q pipeline kernels jobs >/dev/null
	$(BIN)/python -m pytest -q -n 2

bench: $(BENCHSTAMP)
	$(BIN)/python -m pytest -q -m slow
	$(BIN)/python tests/benchmarks/bench_mdav.py
	$(BIN)/python tests/benchmarks/bench_stats.py
	$(BIN)/python tests/benchmarks/bench_methods.py target
	$(BIN)/python tests/benchmarks/bench_methods.py table
	$(BIN)/python tests/benchmarks/bench_methods.py race --datasets census,eia,tax,extract
	$(BIN)/python tests/benchmarks/bench_methods.py dba
	$(BIN)/python tests/benchmarks/bench_methods.py refine
	$(BIN)/python tests/benchmarks/bench_methods.py members
	$(BIN)/python tests/benchmarks/bench_methods.py ties --methods md,dba,gsms,kward,mdav,auto
	$(BIN)/python tests/benchmarks/bench_pipeline.py floors --rows 1M,10M
	$(BIN)/python tests/benchmarks/bench_pipeline.py inprocess --rows 100000
	$(BIN)/python tests/benchmarks/bench_pipeline.py blocking --rows 1000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py blocking --rows 1000000 --layouts 2500/32/6 --profile
	$(BIN)/python tests/benchmarks/bench_pipeline.py fanin --rows 10M,30M
	$(BIN)/python tests/benchmarks/bench_pipeline.py small
	$(BIN)/python tests/benchmarks/bench_pipeline.py cpu --rows 10000000 --runs 2
	$(BIN)/python tests/benchmarks/bench_pipeline.py files --rows 1000000 --files 2000 --runs 2
	$(BIN)/python tests/benchmarks/bench_pipeline.py csv --rows 1000000 --runs 2
	$(BIN)/python tests/benchmarks/bench_pipeline.py zeros --rows 1000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py ties --rows 1000000 --methods mdav,auto --runs 2
	$(BIN)/python tests/benchmarks/bench_pipeline.py scale --rows 1000000 --runs 3
	$(BIN)/python tests/benchmarks/bench_pipeline.py scale --rows 10000000 --runs 3
	$(BIN)/python tests/benchmarks/bench_pipeline.py scale --rows 10000000 --one-file --processes --memory-limit 1.5GiB
	$(BIN)/python tests/benchmarks/bench_pipeline.py evaluate --rows 1000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py evaluate --rows 10000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py methods --rows 1000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py methods --rows 1000000 --methods mdav,auto,auto:portfolio=full
	$(BIN)/python tests/benchmarks/bench_pipeline.py modes --rows 1000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py modes --rows 10000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py methods --rows 1000000 --methods mdav,pcp,zscore,univariate
	$(BIN)/python tests/benchmarks/bench_pipeline.py methods --rows 10000000 --methods pcp,univariate
	$(BIN)/python tests/benchmarks/bench_pipeline.py sweep --rows 1000000,10000000,30000000
	$(BIN)/python tests/benchmarks/bench_pipeline.py sweep --rows 1000000,10000000 --processes --memory-limit 1.5GiB
	$(BIN)/python tests/benchmarks/bench_pipeline.py sweep --rows 1000000,10000000,30000000 --processes --memory-limit 4GiB
	$(BIN)/python tests/benchmarks/bench_pipeline.py keeping --rows 10000000 --runs 2
	$(BIN)/python tests/benchmarks/project_workers.py --rows 1M,10M

clean:
	rm -rf $(VENV) demo-release .pytest_cache .hypothesis build *.egg-info
