.PHONY: setup demo test ui

setup:
	./setup.sh

# Ingest the bundled samples, summarize them with the embedded model, print where to look.
demo: setup
	.venv/bin/session-digest demo

# The whole suite, the real-model tests included.
test: setup
	.venv/bin/python -m pytest

ui: setup
	.venv/bin/session-digest ui
