.PHONY: setup demo test test-fast lint ui

# .venv is (re)built when it is missing or the project's files that define it changed.
VENV = .venv/.ready

$(VENV): pyproject.toml setup.sh
	./setup.sh
	touch $(VENV)

setup: $(VENV)

# Ingest the bundled samples, summarize them with the embedded model, print where to look.
demo: $(VENV)
	.venv/bin/session-digest demo

# The whole suite, the real-model ones included (as CI runs it), on four workers: most tests wait on
# the clock (deadlines, stalls, Dagster's daemon), so two more workers overlap waits on two cores
# (docs/testing.md has the measurements). Each worker is handed two tests at a time (--maxschedchunk 2),
# not a block of a quarter of its share at the start: the block of one worker held every benchmark
# smoke, 20 minutes of tests in a row.
# --durations prints where the time went. Bytecode is written, as for test-fast: where
# PYTHONDONTWRITEBYTECODE is set, each of the suite's hundreds of CLI, run and bench processes compiled
# the project's modules again (0.6-0.8 s of CPU a process that loads the definitions).
test: $(VENV)
	PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -n 4 --maxschedchunk 2 --durations=40

# The unit tier alone (tests/conftest.py TIERS): pure functions, DuckDB, a local HTTP server.
# No unit test uses hypothesis or anyio, and their plugins import all of them (a second of CPU).
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: pytest keeps its rewritten test
# modules there, and compiling them again is some 3 s of CPU a run.
test-fast: $(VENV)
	PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -m unit -q -p no:hypothesispytest -p no:anyio

# ruff: lint and format check ([tool.ruff] in pyproject.toml).
lint: $(VENV)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

ui: $(VENV)
	.venv/bin/session-digest ui
