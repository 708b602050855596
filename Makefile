# Two commands a newcomer needs: `make demo` and `make test`. Both bootstrap .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow bench device-check venv clean browser lint format docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# CPU torch first: the pinned wheel comes from local disk; an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	# Pin whatever torch is now in the venv so no extra can swap it for another build.
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-pin.txt
	$(BIN)/python -m pip install -q -c $(VENV)/torch-pin.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/megadump demo

# The HTML report is tested in a real headless browser: Debian's chromium, installed here (root + apt-get)
# when missing, so the suite itself installs nothing. Without root or apt the browser tests skip (not under CI).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      echo "installing chromium (apt-get) for the report's browser tests"; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	    else echo "chromium not installed and apt-get unavailable: the report's browser tests will skip"; fi; }

# The stored-fixture tests again under another CPU capability and one thread: a fresh run's floats then differ
# from the fixture's by an ulp, as on another machine, so a bit-for-bit float promise fails here too.
FIXTURE_TESTS := tests/read/test_fixtures.py

# Pyflakes' rules (undefined names, unused imports, redefinitions) and ruff's formatter (check only) on every
# Python file; the layer contract itself is a test (tests/test_layers.py). `make format` rewrites the files.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks

test: $(STAMP) browser lint
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(FIXTURE_TESTS)

# The documentation site (Sphinx + MyST, docs/) with warnings as errors; `make test` builds it too
# (tests/docs/test_docs_build.py) and runs every Python block of every page (tests/docs/test_code_blocks.py).
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider -m slow

bench: $(STAMP)
	$(BIN)/python -m benchmarks.export
	$(BIN)/python -m benchmarks.read
	$(BIN)/python -m benchmarks.compare
	$(BIN)/python -m benchmarks.peer_compare
	$(BIN)/python -m benchmarks.codecs
	$(BIN)/python -m benchmarks.upload
	$(BIN)/python -m benchmarks.reliability
	$(BIN)/python -m benchmarks.distributed
	$(BIN)/python -m benchmarks.report
	$(BIN)/python -m benchmarks.statistics

# The demo's L0 and L1 dumps on CUDA against CPU (ints exact, floats within tolerance); skips (exit 0) without CUDA.
device-check: $(STAMP)
	@$(BIN)/python -m benchmarks.device_check

clean:
	rm -rf $(VENV) megadump-demo* docs/_build
