"""The input revision is the original's, byte for byte: golden fixtures from Neo.mjs, ingested
through the real ingest into a real DuckDB store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from digest.ingest import ingest_paths
from digest.turns import Turn, canonical_order, input_revision
from resources.store import DigestStore

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "revision-expected.json").read_text(encoding="utf-8"))
# Split on "\n" only: a document holds a raw U+2028, which str.splitlines() would cut at.
INPUT_LINES = (FIXTURES / "revision-input.memory-backup.jsonl").read_text(encoding="utf-8").rstrip("\n").split("\n")


def ingest_lines(store: DigestStore, folder: Path, lines: list[str]) -> dict[str, dict]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory-backup-2025-11-20T00-00-00.000Z.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = ingest_paths([folder], store)
    assert report.rejects == 0 and report.turns == len(lines)
    with store.file.connect(read_only=True) as con:
        cursor = con.execute("SELECT * FROM sessions")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


def test_every_fixture_session_has_the_originals_revision(store, tmp_path):
    sessions = ingest_lines(store, tmp_path / "bundle", INPUT_LINES)

    assert len(INPUT_LINES) == 17 and len(EXPECTED) == 6
    assert {sid: row["input_revision"] for sid, row in sessions.items()} == EXPECTED


def test_the_order_lines_are_read_in_changes_no_revision(store, tmp_path):
    sessions = ingest_lines(store, tmp_path / "bundle", list(reversed(INPUT_LINES)))

    assert {sid: row["input_revision"] for sid, row in sessions.items()} == EXPECTED


def test_canonical_order_is_the_originals(store, tmp_path):
    ingest_lines(store, tmp_path / "bundle", INPUT_LINES)

    def order(session_id: str) -> list[str]:
        return [t.id for t in canonical_order(store.sessions.load_turns([session_id]))]

    # A timestamp tie goes by localeCompare (ICU), not by code point ("10" < "9" < "Bx" < "_z" < "aY" < "ax").
    assert order("rev-tie-case") == ["_z", "10", "9", "ax", "aY", "Bx"]
    # No timestamp counts as 0; `createdAt` stands in for a missing `timestamp`.
    assert order("rev-ts-forms") == ["t4d", "t4c", "t4a", "t4b"]
    stamps = {t.id: t.ts_ms for t in store.sessions.load_turns(["rev-ts-forms"])}
    assert stamps == {"t4a": 1_763_600_005_000, "t4b": 1_763_600_400_000, "t4c": 1_763_596_800_000, "t4d": None}


def turn(turn_id: str, ts_ms: int | None = 1_000, **fields) -> Turn:
    return Turn(id=turn_id, session_id="s", document=f"doc {turn_id}", ts_ms=ts_ms, **fields)


@pytest.mark.parametrize(
    "ids, expected",
    [
        (["b", "A", "a", "B"], ["a", "A", "b", "B"]),  # lower case first at the tertiary level
        (["t-2", "t_1", "t.3", "t:4", "t10", "t9"], ["t_1", "t-2", "t:4", "t.3", "t10", "t9"]),
        (["zebra", "Ähre", "apfel", "über", "ufo"], ["Ähre", "apfel", "über", "ufo", "zebra"]),
        (
            ["s-10", "S-9", "s_1", "s.2", "s:3", "s1", "ét", "et", "Et", "Ét"],
            ["et", "Et", "ét", "Ét", "s_1", "s-10", "S-9", "s:3", "s.2", "s1"],
        ),
    ],
)
def test_ties_sort_as_localecompare_does(ids, expected):
    # Expected orders are Node 20's `ids.sort((a, b) => a.localeCompare(b))`.
    assert [t.id for t in canonical_order([turn(i) for i in ids])] == expected


def test_ids_the_collator_holds_equal_get_one_order_whatever_the_read_order():
    composed, decomposed = "caf\u00e9", "cafe\u0301"  # canonically equivalent: localeCompare gives 0
    forward = canonical_order([turn(composed), turn(decomposed)])
    backward = canonical_order([turn(decomposed), turn(composed)])

    assert [t.id for t in forward] == [t.id for t in backward] == [decomposed, composed]  # then by code point
    assert input_revision(forward) == input_revision(backward)


def test_a_missing_identity_is_hashed_as_null_and_an_empty_one_as_empty():
    missing = input_revision([turn("t1")])
    empty = input_revision([turn("t1", agent_identity="", user_id="")])
    payload = (
        '{"version":1,"turns":[{"id":"t1","document":"doc t1","agentIdentity":null,"sessionId":"s","userId":null}]}'
    )

    assert missing == "sha256:" + hashlib.sha256(payload.encode()).hexdigest()
    assert empty != missing


def test_an_empty_identity_is_kept_as_exported(store, tmp_path):
    line = json.loads(INPUT_LINES[0])
    line["metadata"].update(agentIdentity="", userId="")
    ingest_lines(store, tmp_path / "bundle", [json.dumps(line)])

    (loaded,) = store.sessions.load_turns(["rev-all-fields"])
    assert (loaded.agent_identity, loaded.user_id) == ("", "")
