"""`session-digest search` and `show` as a person runs them (the CLI in a subprocess, over a real
store holding the samples): ranked sessions with their turns, `--json` for scripts, the filters, a
session's provenance, facts and turns paged, and bad input as one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.search_cli import BadInput, refresh_index, since_ms
from tests.conftest import project_free_environ

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "app.cli"]
CLAUDE = "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90"
CODEX = "01936a4e-7c1b-7d42-9a0e-3b5f2c8d1e67"
SUMMARIZED = "d23f0824-128b-4f33-8c5c-7fd0a6a3a450"


def run(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = project_free_environ()
    return subprocess.run(
        CLI + list(args), env={**env, "DIGEST_HOME": str(home)}, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("home")
    done = run(home, "ingest", str(ROOT / "samples" / "bundle"), str(ROOT / "samples" / "harnesses"))
    assert done.returncode == 0, done.stderr[-2000:]
    return home


def test_search_ranks_sessions_with_their_turns_and_json_for_scripts(home):
    done = run(home, "search", "grid", "selection", "sort", "--json")
    assert done.returncode == 0, done.stderr
    # Compact by default: each session by its card line, its best matches cited, snippets short.
    answer = json.loads(done.stdout)
    hits = answer["results"]
    assert answer["count"] == len(hits) and "\n" not in done.stdout.strip() and "why" not in answer
    assert hits[0]["session_id"] == SUMMARIZED and hits[0]["score"] > hits[-1]["score"] >= 0
    assert hits[0]["line"].startswith("Fix grid selection jumping after sort (#13904).") and hits[0]["tier"] == "raw"
    assert 1 <= len(hits[0]["matches"]) <= 2 and all(len(m["snippet"]) <= 200 for m in hits[0]["matches"])
    assert all(m["cite"].startswith(SUMMARIZED) for m in hits[0]["matches"])
    assert any("**" in m["snippet"] for m in hits[0]["matches"])  # the matched terms marked
    # --full: every field of each hit, as before.
    full = json.loads(run(home, "search", "grid", "selection", "sort", "--json", "--full").stdout)
    assert full[0]["session_id"] == SUMMARIZED and full[0]["turn_ids"] and full[0]["verdict"] == "ok"

    text = run(home, "search", "grid", "selection", "sort", "--limit", "1").stdout
    assert "1. Fix grid selection jumping after sort (#13904)" in text
    assert f"{SUMMARIZED}  2026-11-18 09:41  raw summary, verdict ok  bugfix" in text
    assert " 2. " not in text


def test_search_filters_by_file_category_and_date(home):
    by_file = json.loads(run(home, "search", "port", "--file", "server.py", "--json").stdout)["results"]
    assert [h["session_id"] for h in by_file] == [CLAUDE]
    empty = json.loads(run(home, "search", "grid", "--category", "refactoring", "--json").stdout)
    assert (empty["count"], empty["why"]) == (0, "no session matches 'grid' with --category refactoring")
    since = json.loads(run(home, "search", "port", "--since", "2026-11-19", "--json").stdout)["results"]
    assert since[0]["session_id"] == CODEX
    nothing = run(home, "search", "zzzqqq", "--file", "server.py")
    assert nothing.returncode == 0 and nothing.stdout.strip() == "no session matches 'zzzqqq' with --file server.py"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["search", "the", "of", "and"], "has only common words"),
        (["search", " "], "the query is empty"),
        (["search", "word " * 300], "at most 1,000 are searched"),
        (["search", "port", "--since", "last tuesday"], "--since 'last tuesday' is not a date"),
        (["search", "port", "--category", "chores"], "unknown category 'chores'"),
        (["search", "port", "--limit", "0"], "must be a positive whole number"),
        (["show", "no-such-session"], "no such session: no-such-session"),
        (["show", CLAUDE, "--turns", "--limit", "0"], "--limit 1 or more"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(home, args, reason):
    done = run(home, *args)
    assert done.returncode == 2
    assert reason in done.stderr and "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("session-digest")]) == 1


def test_show_gives_the_provenance_the_facts_and_the_turns_paged(home):
    view = json.loads(run(home, "show", SUMMARIZED, "--json").stdout)
    summary = view["summary"]
    assert summary["title"].startswith("Fix grid selection") and summary["origin"] == "imported"
    assert (summary["source_tier"], summary["route_reason"], summary["verdict"]) == ("raw", "imported", "ok")
    assert summary["covered_turns"] == view["turn_count"] == 5 and "turns" not in view
    assert view["account"] == "summary" and view["card"]["title"] == summary["title"]

    view = json.loads(run(home, "show", CLAUDE, "--turns", "--offset", "1", "--limit", "5", "--json").stdout)
    assert view["summary"] is None and view["account"] == "card"
    card = view["card"]
    assert card["source_tier"] == "facts" and card["asks"][0]["turn_id"] == "7c0e0000-1d2b-4f5a-8c3e-a1b2c3d4e5f6"
    assert {e["text"] for e in card["edited"]} == {"/home/dev/webapp/server.py", "/home/dev/webapp/README.md"}
    assert view["project"] == "/home/dev/webapp" and view["source_path"].endswith(".jsonl")
    assert ("file-edit", "/home/dev/webapp/server.py") in {(f["kind"], f["value"]) for f in view["facts"]}
    assert view["turns"]["total"] == 2 and [t["id"] for t in view["turns"]["items"]] == [
        "7c0e000b-1d2b-4f5a-8c3e-a1b2c3d4e5f6"
    ]

    text = run(home, "show", CLAUDE, "--turns", "--limit", "1").stdout
    # The card is the account: its title, then each item with its turn.
    assert text.startswith("The dev server ignores PORT") and "Card (from the session's own facts" in text
    assert "Edited: /home/dev/webapp/server.py [#1]; /home/dev/webapp/README.md [#2]" in text
    assert "project /home/dev/webapp" in text and "read from " in text
    assert "Turns 1–1 of 2" in text and "… next page: --offset 1" in text
    assert "characters; --json has all)" in text  # the 89 KB response is cut on the terminal


def test_since_reads_dates_times_and_spans():
    now = 1_800_000_000_000
    assert since_ms("2026-11-18", now) == 1_794_960_000_000
    assert since_ms("2026-11-18T09:00:00+01:00", now) == 1_794_960_000_000 + 8 * 3_600_000
    assert since_ms("7d", now) == now - 7 * 86_400_000
    assert since_ms(" 12h ", now) == now - 12 * 3_600_000
    for bad in ("yesterday", "1795046400000", "7 days"):
        with pytest.raises(BadInput):
            since_ms(bad, now)


def test_an_index_that_cannot_be_refreshed_is_said_and_searched_as_it_is():
    import duckdb

    class Busy:
        def refresh(self):
            raise duckdb.IOException("Could not set lock on file: Conflicting lock is held")

    class Store:
        search = Busy()

    assert refresh_index(Store()).startswith("the search index was not brought up to date (IOException: Could not set")


def test_blame_and_why_find_sessions_by_what_their_turns_did(home):
    blamed = json.loads(run(home, "blame", "ci.yml", "--json").stdout)
    assert [r["sessionId"] for r in blamed["results"]] == [CODEX]
    assert blamed["results"][0]["line"].startswith("Asked: Why does `make test` fail")
    assert blamed["results"][0]["changed"][0].startswith(f"{CODEX}:")
    # A file only read is no change: the Claude Code session read server.py's neighbours, edited server.py.
    assert json.loads(run(home, "blame", "server.py", "--json").stdout)["results"][0]["sessionId"] == CLAUDE
    none = json.loads(run(home, "blame", "never.py", "--json").stdout)
    assert none["count"] == 0 and "no session edited or created" in none["why"]

    made = json.loads(run(home, "why", "4e1f2a9", "--json").stdout)
    (hit,) = made["results"]
    assert hit["how"] == "made or showed" and hit["commit"] == "4e1f2a9 feat: Add --verbose flag to cli.py"
    text = run(home, "why", "4e1f").stdout
    assert "commit: 4e1f2a9 feat: Add --verbose flag to cli.py" in text
    bad = run(home, "why", "zz")
    assert bad.returncode == 2 and "is no commit hash" in bad.stderr
