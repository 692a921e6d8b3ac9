"""A turn's place (project, git branch, redaction counts) through an archive and a restore: kept with its
session's, null from a bundle older than the place columns, and refused when the counts are not counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from digest.archive_read import BundleError, validate_bundle
from digest.ingest import ingest_paths
from resources.store import DigestStore
from tests.bundle_edits import edit_entry, edit_line, file_of, fingerprint, manifest, raw_lines, reseal

GH_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
PLACE_KEYS = ("project", "gitBranch", "redactions")
TURN_PLACE_COLUMNS = ("project", "git_branch", "redactions")


def _claude_code_log(path: Path, session: str, prompts: list[str]) -> Path:
    """A Claude Code transcript: each prompt a user event and its answer, both recording the working
    directory and the git branch, as the harness does."""
    events, parent = [], None
    for i, prompt in enumerate(prompts):
        for kind, content in (("user", prompt), ("assistant", [{"type": "text", "text": f"done {i}"}])):
            uuid = f"{session}-{kind}-{i}"
            message = {"role": kind, "content": content} | (
                {"model": "claude-sonnet-4-5"} if kind == "assistant" else {}
            )
            events.append({"type": kind, "sessionId": session, "uuid": uuid, "parentUuid": parent,
                           "timestamp": f"2026-11-20T10:0{i}:00Z", "cwd": "/home/ada/src/app",
                           "gitBranch": "feat/backoff", "message": message})  # fmt: skip
            parent = uuid
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _placed_store(tmp_path) -> DigestStore:
    """A store of a Claude Code session (its project, branch and a secret redacted at ingest) and a
    plain-format one that says nowhere."""
    store = DigestStore(tmp_path / "placed" / "digest.duckdb")
    store.migrate()
    cc = _claude_code_log(tmp_path / "logs" / "cc.jsonl", "cc", [f"push with {GH_TOKEN}", "then run the tests"])
    plain = tmp_path / "logs" / "plain.jsonl"
    plain.write_text(json.dumps({"id": "p-1", "session_id": "plain", "timestamp": 1_760_000_000_000,
                                 "prompt": "hello", "response": "hi"}) + "\n")  # fmt: skip
    ingest_paths([cc, plain], store)
    return store


TURN_PLACES = "SELECT id, project, git_branch, redactions FROM turns ORDER BY id"
SESSION_PLACES = "SELECT session_id, project, git_branch, source_path FROM sessions ORDER BY session_id"


def _rows(store: DigestStore, sql: str) -> list[tuple]:
    with store.file.connect() as con:
        return con.execute(sql).fetchall()


@pytest.mark.parametrize("mode", ["merge", "replace"])
def test_a_turns_project_branch_and_redactions_come_back_with_its_sessions_places(tmp_path, mode):
    store = _placed_store(tmp_path)
    turns, sessions = _rows(store, TURN_PLACES), _rows(store, SESSION_PLACES)
    # What the ingest stored, so the round trip below has something to lose.
    assert [t[1:3] for t in turns if t[0].startswith("cc")] == [("/home/ada/src/app", "feat/backoff")] * 2
    assert sorted(json.loads(t[3]) for t in turns if t[3] is not None) == [{"github-token": 1}]
    assert sessions[0][:3] == ("cc", "/home/ada/src/app", "feat/backoff") and sessions[1][1:3] == (None, None)
    archived = store.archive.write_archive(tmp_path / "archives")
    bundle = Path(archived["path"])
    lines = [json.loads(line) for line in (bundle / file_of(bundle, "memory")).read_text().splitlines()]
    assert {k for line in lines for k in line["metadata"]} >= set(PLACE_KEYS)
    # Absent values are left out, as flat metadata does.
    assert not set(PLACE_KEYS) & set(next(line for line in lines if line["id"] == "p-1")["metadata"])
    # Every stored turn column is in the file (the vector as its JSON text; the terms are extracted
    # again from the restored turns): a column added later fails here.
    [memory] = [f for f in manifest(bundle)["files"] if f["kind"] == "memory"]
    stored = _rows(store, "SELECT column_name FROM information_schema.columns WHERE table_name = 'turns'")
    assert {c for c, _ in memory["columns"]} == {c for (c,) in stored} - {"embedding_f32", "terms", "terms_words"}

    copy = DigestStore(tmp_path / "copy" / "digest.duckdb")
    copy.migrate()
    copy.archive.restore_archive(validate_bundle(bundle), mode)
    assert _rows(copy, TURN_PLACES) == turns
    assert _rows(copy, SESSION_PLACES) == sessions
    assert copy.projects.redactions() == store.projects.redactions()
    # Every stored column of every table the bundle restores comes back; `sessions` is derived.
    live, restored = fingerprint(store.path), fingerprint(copy.path)
    for table in set(live) - {"archives", "sessions", "schema_meta"}:
        assert restored[table] == live[table], table

    # The bundle read as an export (`session-digest ingest BUNDLE`) gives them back too.
    ingested = DigestStore(tmp_path / "ingested" / "digest.duckdb")
    ingested.migrate()
    ingest_paths([bundle], ingested)
    assert _rows(ingested, TURN_PLACES) == turns
    assert [s[:3] for s in _rows(ingested, SESSION_PLACES)] == [s[:3] for s in sessions]


def _without_places(bundle: Path) -> None:
    """The bundle as code before the place columns wrote it: no such keys, no such turn columns."""
    name = file_of(bundle, "memory")
    for index in range(len(raw_lines(bundle, name))):
        edit_line(bundle, name, index, lambda obj: [obj["metadata"].pop(k, None) for k in PLACE_KEYS])
    edit_entry(bundle, name, lambda e: e.update(columns=[c for c in e["columns"] if c[0] not in TURN_PLACE_COLUMNS]))
    reseal(bundle)


def test_a_bundle_from_before_the_place_columns_restores_them_as_null(tmp_path):
    store = _placed_store(tmp_path)
    bundle = Path(store.archive.write_archive(tmp_path / "archives")["path"])
    _without_places(bundle)

    copy = DigestStore(tmp_path / "copy" / "digest.duckdb")
    copy.migrate()
    copy.archive.restore_archive(validate_bundle(bundle), "merge")
    assert _rows(copy, TURN_PLACES) == [(i, None, None, None) for i, *_ in _rows(store, TURN_PLACES)]
    # The source path is the turns' source file, which such a bundle has.
    assert _rows(copy, SESSION_PLACES) == [(s, None, None, path) for s, _, _, path in _rows(store, SESSION_PLACES)]

    # Such a bundle's line may not carry the keys its turn columns lack.
    edit_line(bundle, file_of(bundle, "memory"), 0, lambda obj: obj["metadata"].update(project="/w"))
    reseal(bundle)
    with pytest.raises(BundleError, match="metadata keys this bundle's turn columns do not have: project"):
        validate_bundle(bundle)


def test_a_turns_redactions_must_be_counts_by_kind(tmp_path):
    store = _placed_store(tmp_path)
    bundle = Path(store.archive.write_archive(tmp_path / "archives")["path"])
    name = file_of(bundle, "memory")
    index = next(i for i, raw in enumerate(raw_lines(bundle, name)) if b'"redactions"' in raw)
    edit_line(bundle, name, index, lambda obj: obj["metadata"].update(redactions='{"github-token": "one"}'))
    reseal(bundle)
    with pytest.raises(BundleError, match="redactions: not a JSON object of kinds and their counts"):
        validate_bundle(bundle)
