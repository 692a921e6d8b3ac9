"""Property test of incremental reading (`digest.manifest`): a folder of mixed, nested, growing
logs (Claude Code and Codex sessions in their real layouts, a sub-agent's file beside its session)
is appended to in random chunks, with ingests in between: chunks end mid-line (a torn last line),
and a line already read is rewritten in place (same size: only the hash tells). No line is lost:
every line of every read is a turn, a fold, a reject or a skip; and the final store equals a
one-shot ingest of the final files into a fresh store."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from digest.ingest import ingest_paths
from resources.store import DigestStore
from tests.harness_homes import PROJECT, claude_turn, codex_head, codex_turn
from tests.test_ingest import rows

SESSION = "5f1c2d3e-0000-4000-8000-00000000000"


def _layout(kinds: list[tuple[str, list[int]]]) -> dict[str, list[str]]:
    """Relative path -> the final lines, for each (harness, tools per turn)."""
    files = {}
    for i, (harness, tools) in enumerate(kinds):
        if harness == "claude":
            session = f"{SESSION}{i}"
            lines = [line for n, t in enumerate(tools, 1) for line in claude_turn(session, n, t, text=f"f{i}")]
            files[f".claude/projects/{PROJECT}/{session}.jsonl"] = lines
        elif harness == "subagent":
            session = f"{SESSION}{i}"
            lines = [
                line for n, t in enumerate(tools, 1) for line in claude_turn(session + "-sub", n, t, sidechain=True)
            ]
            files[f".claude/projects/{PROJECT}/{session}/subagents/agent-{i:04x}.jsonl"] = lines
        else:
            session = f"0199a1b2-{i:04d}"
            lines = codex_head(session) + [line for n, t in enumerate(tools, 1) for line in codex_turn(n, t)]
            files[f".codex/sessions/2026/11/{19 + i:02d}/rollout-2026-11-19T14-02-11-{session}.jsonl"] = lines
    return files


def _content(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def _snapshot(db: DigestStore) -> dict:
    return {
        "turns": sorted(map(str, rows(db, "SELECT * EXCLUDE (ingested_at) FROM turns ORDER BY id"))),
        "sessions": rows(db, "SELECT * EXCLUDE (updated_at) FROM sessions ORDER BY session_id"),
        "rejects": rows(db, "SELECT source_file, line_no, reason FROM rejects ORDER BY source_file, line_no"),
        # Each turn's terms, and the sessions' summed from them, as a one-shot ingest's.
        "turn_terms": rows(db, "SELECT id, unnest(map_entries(terms)), terms_words FROM turns ORDER BY ALL"),
        "fidelity_terms": rows(db, "SELECT * FROM fidelity_terms ORDER BY ALL"),
    }


def _accounted(report) -> None:
    for f in report.files:
        assert f.lines == f.rows + f.rejects + f.superseded + f.skipped + f.folded, f


harness = st.tuples(
    st.sampled_from(["claude", "subagent", "codex"]), st.lists(st.integers(0, 3), min_size=1, max_size=4)
)
event = st.tuples(
    st.integers(0, 3),  # which file
    st.integers(1, 900),  # bytes appended
    st.booleans(),  # ingest after it
    st.integers(0, 4),  # 0: rewrite a line already written, in place
)


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(harness, min_size=1, max_size=4), st.lists(event, min_size=1, max_size=30))
def test_growing_logs_lose_no_line_and_end_as_a_one_shot_ingest(kinds, events):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "home"
        final = {name: _content(lines) for name, lines in _layout(kinds).items()}
        names = list(final)
        written = dict.fromkeys(names, 0)
        db = DigestStore(Path(tmp) / "incremental.duckdb")
        db.migrate()
        for which, size, ingest_now, rewrite in events:
            name = names[which % len(names)]
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if rewrite == 0 and written[name] > 0:
                # A line already written changes in place, as a new version of the final file.
                old = final[name]
                at = old.find(b"prompt", 0, written[name])
                if at >= 0:
                    final[name] = old[:at] + b"PROMPT" + old[at + 6 :]
                    path.write_bytes(final[name][: written[name]])
            end = min(len(final[name]), written[name] + size)
            with path.open("ab") as handle:
                handle.write(final[name][written[name] : end])
            written[name] = end
            if ingest_now:
                _accounted(ingest_paths([root], db))
        for name in names:  # the files as they end
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(final[name])
        _accounted(ingest_paths([root], db))

        fresh = DigestStore(Path(tmp) / "fresh.duckdb")
        fresh.migrate()
        one_shot = ingest_paths([root], fresh)
        _accounted(one_shot)
        for f in one_shot.files:
            assert f.lines == final[str(Path(f.path).relative_to(root))].count(b"\n")
        assert _snapshot(db) == _snapshot(fresh)
        assert len(rows(fresh, "SELECT id FROM turns")) == one_shot.turns
