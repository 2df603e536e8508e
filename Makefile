# moeplan — front door. `make demo` runs the main job, `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-all test-browser bench fuzz lint fmt typecheck clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[runtime,dev,hf]"
	touch $(STAMP)

# make demo: first a GPU users serve on (Qwen3-30B-A3B on one 8 x H100 SXM node, about 50 s on
# 2 CPU cores), then two of the papers' testbeds (SMIDT's A40 nodes, FinDEP's cluster A).
demo: $(STAMP)
	$(BIN)/moeplan plan --model qwen3-30b-a3b --cluster h100-sxm-8 --out out/demo-qwen3-30b-h100
	$(BIN)/moeplan plan --model qwen3-235b-a22b --cluster smidt-a40 --out out/demo-qwen3-235b-smidt-a40
	$(BIN)/moeplan plan --model deepseek-v2 --layers 8 --cluster findep-a --out out/demo-deepseek-v2-findep-a
	@echo "Next: ./moeplan --help (the README's commands, from this folder), or put .venv/bin on"
	@echo "your PATH to type 'moeplan': export PATH=\"$(CURDIR)/$(BIN):\$$PATH\""

# make test (and CI): lint, then every test not marked slow, property tests at a quarter of
# their examples (tests/hypothesis_budget.py). make test-slow: the full sweeps marked slow
# (each keeps a smaller representative in make test) and every property test at its full
# example count. make test-all: everything at full count. Times: CONTRIBUTING.md, Test.
test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/pytest -n auto --dist loadfile -m "not slow"

test-slow: $(STAMP)
	HYPOTHESIS_PROFILE=full $(BIN)/pytest -n auto --dist loadfile -m "slow or hypothesis"

test-all: $(STAMP)
	HYPOTHESIS_PROFILE=full $(BIN)/pytest -n auto --dist loadfile

test-browser: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)
	MOEPLAN_UPDATE_SCREENSHOT=1 $(BIN)/pytest -m browser

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

fuzz: $(STAMP)  # malformed inputs through the CLI, 30 s limit each (docs/benchmarks/fuzz.md); every flag swept
	$(BIN)/python bench/fuzz_all.py --cases 150
	$(BIN)/python bench/flag_sweep.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy  # the files listed under [tool.mypy] in pyproject.toml

clean:
	rm -rf $(VENV) build dist *.egg-info
