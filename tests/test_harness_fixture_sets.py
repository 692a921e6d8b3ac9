"""Every file of the harness fixture sets (tests/fixtures/harnesses/<harness>/<version>/): told
apart by its content, found in its folder, every line accounted for once, nothing rejected, and
every turn row carrying `project` and `git_branch`."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import digest.readers
from digest.ingest import discover
from digest.manifest import APPENDABLE
from digest.readers import HARNESSES, file_kind
from tests.harness_fixtures import FIXTURES, read_file

KINDS = {
    "claude-code": "claude-code",
    "codex": "codex",
    "aider": "aider",
    "swe-agent": "trajectory",
    "mini-swe-agent": "trajectory",
}
# Not logs: the generators, and Claude Code's sub-agent sidecars (`agent-<id>.meta.json`).
FILES = sorted(
    p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".py" and not p.name.endswith(".meta.json")
)


def test_each_harness_has_at_least_two_layout_versions():
    versions = {
        harness: {p.parent.name for p in FILES if p.relative_to(FIXTURES).parts[0] == harness} for harness in KINDS
    }
    assert all(len(v) >= 2 for v in versions.values()), versions
    assert len(versions["codex"]) >= 3


def test_every_harness_reader_module_is_registered_once():
    # A harness reader is its module and its line in `HARNESSES`: one left out is never read.
    shared = {"common", "harness", "neo", "plain"}
    modules = {m.name for m in pkgutil.iter_modules(digest.readers.__path__)} - shared
    declared = [importlib.import_module(f"digest.readers.{name}").HARNESS for name in sorted(modules)]
    assert sorted(h.kind for h in HARNESSES) == sorted(h.kind for h in declared) == sorted(set(KINDS.values()))
    # What a harness declares is what the ingest does with its logs: Claude Code's and Codex's grow.
    assert {h.kind for h in HARNESSES if h.resume_context} == {"claude-code", "codex"} <= APPENDABLE.keys()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_each_fixture_reads_whole_as_its_harness(path):
    assert file_kind(path) == KINDS[path.relative_to(FIXTURES).parts[0]]
    assert path in discover([path.parent])
    reads = read_file(path)  # every line once
    assert [r for r in reads if r.outcome == "reject"] == []
    turns = [r.row for r in reads if r.outcome == "turn"]
    # A file of bookkeeping lines only (Claude Code's `teleported-from` stub) has no turn: every line a skip.
    assert turns or all(r.outcome == "skip" for r in reads)
    assert all({"project", "git_branch"} <= row.keys() for row in turns)
