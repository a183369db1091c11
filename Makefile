# Two commands on a fresh machine with Python 3.11:  make demo  and  make test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DB := demo/memory.db

.PHONY: demo test lint suite soak install bench quality docs clean

$(BIN)/dreamd: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/dreamd

# Build a memory file from the shipped sample conversations, dream once, show the result.
demo: install
	$(BIN)/dreamd --db $(DEMO_DB) demo --replace
	$(BIN)/dreamd --db $(DEMO_DB) --config examples/demo.toml --force
	$(BIN)/dreamd --db $(DEMO_DB) --config examples/demo.toml show --gists 3
	$(BIN)/dreamd --db $(DEMO_DB) --config examples/demo.toml status --runs 1

# Lint and types are checked while the suite runs: the suite leaves part of two cores idle
# (it waits on its processes and servers), and a fresh clone's mypy takes half a minute.
# Each line is printed whole, as it comes; either failing fails make test.
test: install
	$(MAKE) --no-print-directory --jobs=2 --output-sync=line lint suite

lint: install
	$(BIN)/ruff check dreamd tests bench testkit docs
	$(BIN)/mypy
	$(BIN)/mypy --strict dreamd  # the package itself: strict (tests and benches: the config's)

suite: install
	$(BIN)/python -m pytest -n 4 --dist worksteal --durations=10 -m 'not soak'

# The long runs: 600 passes beside a live writer, kill -9 at random moments (of a dreamd on a
# file and of PostgreSQL workers), a 20k-turn pass beside a live writer, two and four
# PostgreSQL workers sharing 500 users, the faults two PostgreSQL workers survive
# (restarts, killed connections, a paused server, two minutes down), the fact selector
# learned again from its examples (~5 min; CI runs it).
soak: install
	$(BIN)/python -m pytest -n 4 --durations=0 -m soak

bench: install
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.llm

# Memory quality on the LoCoMo and LongMemEval_S dev slices in ../shared/data (~10 min).
quality: install
	$(BIN)/python -m bench.quality

# The documentation site, into site/: --strict fails on any warning (a broken link, a page
# left out of the nav). The references are written from the code as it builds
# (docs/gen_reference.py, mkdocs-click). Material for MkDocs prints a notice about its end
# of life on every build, and mkdocs-gen-files one about MkDocs 2: the two variables keep
# the output to the build's own lines.
docs: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) demo site *.egg-info
