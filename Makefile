# Two set-up commands: `make demo` (the main job on the embedded seed recipe) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# SGLang's own bench_serving, as shipped in the sglang 0.5.23 wheel, installed without its runtime
# dependencies (torch, CUDA) into a directory of its own; monitor/emulate/bench_serving.py runs it.
SGLANG_WHEEL_DIR := $(VENV)/sglang-0.5.23
# An older prometheus_client, as an SGLang host may have it, for the test of what Prometheus stores
# (tests/generate/test_stored_names.py); the project itself runs on the current one.
OLD_CLIENT_DIR := $(VENV)/prometheus-client-0.25.0
# The gateways live in their own venvs under the project's venv: smg 1.13 installs a `smg` binary that
# clashes with sglang-router 0.3.2's (installed by the dev extra into .venv itself).
# monitor/emulate/router.py finds them at $(VENV)/gateways/<name>-<version>/bin.
GATEWAYS := $(VENV)/gateways
SMG_VERSION := 1.13.0
SMG_VENV := $(GATEWAYS)/smg-$(SMG_VERSION)
SMG_STAMP := $(SMG_VENV)/.installed

# Prometheus 3, Alertmanager 0.35 and Sloth, built once from their pinned Go modules (tools/go_tools.sh) for the
# tests that run every real Prometheus check on both Prometheus 2.42 (Debian) and 3.x.
GO_BIN := $(VENV)/go-bin
GO_STAMP := $(GO_BIN)/.built

.PHONY: venv gateways go-tools demo test lint generate bench bench-leading confusion confusion-grid confusion-random sloth-compare victoriametrics clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps --upgrade --target $(SGLANG_WHEEL_DIR) sglang==0.5.23
	$(BIN)/pip install -q --no-deps --upgrade --target $(OLD_CLIENT_DIR) prometheus-client==0.25.0
	touch $(STAMP)

venv: $(STAMP)

# Order-only on the project venv: a pyproject change must not reinstall the gateway.
$(SMG_STAMP): | $(STAMP)
	$(PY) -m venv $(SMG_VENV)
	$(SMG_VENV)/bin/pip install -q --upgrade pip
	$(SMG_VENV)/bin/pip install -q smg==$(SMG_VERSION)
	$(SMG_VENV)/bin/smg --version
	touch $@

gateways: $(SMG_STAMP)

# No dependency on the venv: the Go builds (minutes, CPU-bound) can run beside the pip installs (network-bound).
$(GO_STAMP): tools/go_tools.sh
	bash tools/go_tools.sh $(GO_BIN)
	touch $@

go-tools: $(GO_STAMP)

demo: $(STAMP) gateways
	$(BIN)/slo-monitor demo

# The tests mostly wait on timers (emulated load, Prometheus evaluations), so they run in TEST_WORKERS processes
# even on 2 cores; the tests that share a running stack or a recorded incident run on one worker, in file order
# (tests/conftest.py groups them). TEST_WORKERS=0 runs them in this process, one after another.
TEST_WORKERS ?= 6

# Tests marked `alone` (the VictoriaMetrics fleet: 30 emulated deployments, a dozen processes) run after the others,
# with the machine to themselves: beside six workers their emulator misses its scrape timeouts on 2 cores.
test: $(STAMP) gateways go-tools
	$(BIN)/ruff check .
	$(BIN)/pytest -q -ra --durations=25 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup -m "not alone")
	$(if $(filter 0,$(TEST_WORKERS)),,$(BIN)/pytest -q -ra --durations=10 -m alone)

lint: $(STAMP)
	$(BIN)/ruff check .

generate: $(STAMP)
	$(BIN)/slo-monitor generate

bench: $(STAMP) go-tools
	$(BIN)/python -m bench --write-results
	$(BIN)/python -m bench.hot_path --write
	$(BIN)/python -m bench.quotes

# Benchmark 4 alone (the leading TPOT warning over 99 healthy emulated hours): its section of bench/RESULTS.md.
bench-leading: $(STAMP)
	$(BIN)/python -m bench --only leading --write-results

# The analyzer's confusion table in docs/analysis.md: every incident kind injected in lockstep, analysed from a
# backfilled Prometheus and from the recording (tests/analyze/test_incident_lab.py fails when it drifts).
confusion: $(STAMP)
	$(BIN)/python -m tools.incident_lab

# The diagnosis grid at the top of docs/analysis.md (tools/incident_lab/grid.py): every incident kind at three
# magnitudes and three arrival rates, healthy controls and pairs, SEEDS seeds (even: tuned, odd: held-out), each
# (seed, rate) in its own process, JOBS at once, analysed from the recording. Niced: it takes the machine for a while
# (7 to 11 minutes with 2 processes). `... --grid --only healthy --rate busy --seeds 2` runs a slice (printed only).
SEEDS ?= 10
JOBS ?= 2
confusion-grid: $(STAMP)
	nice -n 10 $(BIN)/python -m tools.incident_lab --grid --seeds $(SEEDS) --jobs $(JOBS)

# The randomized lab after the grid in docs/analysis.md (tools/incident_lab/randomized.py): per seed, 24 runs with a
# drawn workload, load, healthy / one incident / an ordered pair, shape, magnitude and analysed range, so the verdicts
# are measured on shapes nobody tuned on; SEEDS seeds (even: tuned, odd: held-out, reported as totals only), JOBS
# processes. `... --random --seeds 2 --runs-per-seed 6 --no-write` runs a small one (printed only).
confusion-random: $(STAMP)
	nice -n 10 $(BIN)/python -m tools.incident_lab --random --seeds $(SEEDS) --jobs $(JOBS)

# docs/sloth-comparison.md: our rules and the real Sloth's (from `generate --format sloth`) on one Prometheus 3 over an
# emulated TPOT regression (tests/interop/test_sloth_peer.py fails when it drifts).
sloth-compare: $(STAMP) go-tools
	$(BIN)/python -m tools.sloth_compare

# docs/victoriametrics.md: the generated rules on VictoriaMetrics (vmagent x2, vmalert) fed by 3 sidecar shards and 30
# emulated deployments, beside Prometheus 3 on the same samples: firing times, every recording, faults (~10 min).
victoriametrics: $(STAMP) go-tools
	$(BIN)/python -m tools.victoriametrics

clean:
	rm -rf $(VENV) .pytest_cache
