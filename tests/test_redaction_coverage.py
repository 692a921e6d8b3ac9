"""Every text the store keeps from its input is redacted, rejected lines included: the two cases a
probe found (a Codex output line with an invalid byte after an AWS key, a plain turn with a bad
timestamp and a Stripe key) leave no key in any table or in an archive bundle, while the reject
still says what was wrong and where; the store's schema is walked so that a new text column is
either redacted or named as holding no input; migration 17 redacts the rejects stored before."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from digest.ingest import ingest_paths
from digest.redact import REDACTED_TEXT, redact_json
from resources.store import DigestStore
from resources.store.redaction import NOT_INPUT_TEXT

AWS = "AKIAZ7Q4MX2LRT5WBN3K"
STRIPE = "sk_live_51HxQ2bKp9TnV3rLmW8yZc4Ad"
GH = "ghp_" + "Q7w9E1r3T5" * 3 + "y7U9i1"
SECRETS = (AWS, STRIPE, GH)


def _codex_rollout(path: Path) -> Path:
    """An envelope rollout: a prompt, then a tool output with an invalid UTF-8 byte after an AWS key."""
    session = "0199d0e1-2f3a-7b4c-8d5e-6f7a8b9c0d1e"
    lines = [
        {"timestamp": "2026-11-02T09:00:00.000Z", "type": "session_meta",
         "payload": {"id": session, "timestamp": "2026-11-02T09:00:00.000Z", "cwd": "/home/dev/infra"}},
        {"timestamp": "2026-11-02T09:00:01.000Z", "type": "response_item",
         "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Why is s3 sync denied?"}]}},
        {"timestamp": "2026-11-02T09:00:02.000Z", "type": "response_item",
         "payload": {"type": "function_call", "name": "shell", "call_id": "c1", "arguments": "{\"command\": [\"cat\", \"~/.aws/credentials\"]}"}},
        {"timestamp": "2026-11-02T09:00:03.000Z", "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "c1",
                     "output": f"[default]\naws_access_key_id={AWS}BYTE\nregion=eu-west-1"}},
    ]  # fmt: skip
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    path.write_bytes(text.replace(b"BYTE", b"\xff"))
    return path


def _plain_turns(path: Path) -> Path:
    lines = [
        {"id": "p-1", "session_id": "p", "timestamp": 1_760_000_000_000, "prompt": "hello", "response": "hi"},
        {"id": "p-2", "session_id": "p", "timestamp": "the 3rd of May", "response": "ok",
         "prompt": f"charge it with STRIPE_KEY={STRIPE} and curl https://api.stripe.com -u {STRIPE}:"},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _export_bundle(folder: Path) -> list[Path]:
    """An export's summary and graph lines holding a token in every text they carry, and a summary
    line whose bad tier quotes one into its reject's reason."""
    folder.mkdir()
    summary = {"sessionId": "p", "title": f"Pushed with {GH}", "sourceTier": "raw", "memoryCount": 2,
               "note": f"GITHUB_TOKEN={GH}"}  # fmt: skip
    summaries = folder / "summaries-backup-2026-11-02T00-00-00.000Z.jsonl"
    summaries.write_text(
        json.dumps({"id": "p", "document": f"Used {GH} to push.", "metadata": summary}) + "\n"
        + json.dumps({"id": "q", "document": "x", "metadata": {"sessionId": "q", "sourceTier": f"GITHUB_TOKEN={GH}"}})
        + "\n",
        encoding="utf-8",
    )  # fmt: skip
    graph = folder / "graph-backup-2026-11-02T00-00-00.000Z.jsonl"
    node = {"type": "node", "data": {"id": "n1", "label": "CONCEPT", "properties": {"note": f"token {GH}"}}}
    edge = {"type": "edge", "data": {"source": "n1", "target": "n1", "type": "USES",
                                     "properties": {"weight": 1, "why": f"GITHUB_TOKEN={GH}"}}}  # fmt: skip
    graph.write_text(json.dumps(node) + "\n" + json.dumps(edge) + "\n", encoding="utf-8")
    return [summaries, graph]


def _text_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """Every text column of the store's tables (VARCHAR, its lists, JSON), from DuckDB's catalog."""
    return con.execute(
        """SELECT c.table_name, c.column_name FROM information_schema.columns c
           JOIN information_schema.tables t USING (table_schema, table_name)
           WHERE t.table_type = 'BASE TABLE' AND t.table_schema = current_schema()
             AND (c.data_type LIKE 'VARCHAR%' OR c.data_type = 'JSON')
           ORDER BY ALL"""
    ).fetchall()


def _holding(store: DigestStore, secret: str) -> list[str]:
    """The `table.column`s any row of which holds `secret`."""
    return _holding_each(store, (secret,))[secret]


def _holding_each(store: DigestStore, secrets: tuple[str, ...]) -> dict[str, list[str]]:
    """Each secret's `table.column`s any row of which holds it (one scan of each table for all)."""
    by_table: dict[str, list[str]] = {}
    with store.file.connect() as con:
        for table, column in _text_columns(con):
            by_table.setdefault(table, []).append(column)
        found: dict[str, list[str]] = {secret: [] for secret in secrets}
        for table, columns in by_table.items():
            pairs = [(secret, column) for secret in secrets for column in columns]
            counts = con.execute(
                "SELECT "
                + ", ".join(f'count(*) FILTER (WHERE contains(CAST("{column}" AS VARCHAR), ?))' for _, column in pairs)
                + f' FROM "{table}"',
                [secret for secret, _ in pairs],
            ).fetchone()
            for (secret, column), count in zip(pairs, counts):
                if count:
                    found[secret].append(f"{table}.{column}")
    return found


def test_rejected_lines_and_every_imported_text_keep_no_secret_in_the_store_or_the_bundle(store, tmp_path):
    codex = _codex_rollout(tmp_path / "rollout-2026-11-02T09-00-00-0199d0e1.jsonl")
    plain = _plain_turns(tmp_path / "run.jsonl")
    report = ingest_paths([codex, plain, *_export_bundle(tmp_path / "export")], store)

    assert _holding_each(store, SECRETS) == {secret: [] for secret in SECRETS}
    with store.file.connect() as con:
        rejects = con.execute("SELECT source_file, line_no, reason, excerpt FROM rejects ORDER BY ALL").fetchall()
        metadata = con.execute("SELECT metadata FROM imported_summaries").fetchone()[0]
    by_file = {(Path(f).name, n): (reason, text) for f, n, reason, text in rejects}
    # Each reject still says what was wrong and where, and shows the line around the secret.
    reason, text = by_file[(codex.name, 4)]
    assert reason.startswith("invalid-utf8: byte 0xff at column") and "function_call_output" in text
    assert "[REDACTED:aws-access-key]" in text
    reason, text = by_file[(plain.name, 2)]
    assert reason.startswith("bad-timestamp") and "the 3rd of May" in reason
    assert "STRIPE_KEY=[REDACTED:" in text and '"id": "p-2"' in text
    [(reason, text)] = [v for (name, _), v in by_file.items() if name.startswith("summaries-backup")]
    assert reason.startswith("out-of-range: metadata.sourceTier is 'GITHUB_TOKEN=[REDACTED:")
    # The imported summary's metadata stays JSON, its title redacted as the title column is.
    assert json.loads(metadata)["title"] == "Pushed with [REDACTED:github-token]"
    assert sum(report.redactions.values()) >= 7

    bundle = Path(store.archive.write_archive(tmp_path / "archives")["path"])
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert any(p.name == "rejects.jsonl" for p in files)
    leaks = {p.name for p in files for secret in SECRETS if secret.encode() in p.read_bytes()}
    assert leaks == set()


def test_every_text_column_of_the_schema_is_redacted_or_named_as_holding_no_input(store):
    """A new text column fails here until it is redacted at write (`digest.redact.REDACTED_TEXT`)
    or named, with its reason, in `resources.store.redaction.NOT_INPUT_TEXT`."""
    with store.file.connect() as con:
        columns = set(_text_columns(con))
    redacted = {(table, column) for table, names in REDACTED_TEXT.items() for column in names}
    assert redacted & set(NOT_INPUT_TEXT) == set()  # one list or the other, never both
    assert sorted(columns - redacted - set(NOT_INPUT_TEXT)) == []
    # And neither list names a column the store does not have (a renamed or dropped one).
    assert sorted((redacted | set(NOT_INPUT_TEXT)) - columns) == []
    assert all(reason.strip() for reason in NOT_INPUT_TEXT.values())


def _version_16_store(path: Path, tmp_path: Path) -> DigestStore:
    """A store as version 16 left it: its turns and summaries redacted, but a reject whose excerpt
    and reason hold secrets, an imported summary's metadata and imported graph rows holding one."""
    store = DigestStore(path)
    store.migrate()
    ingest_paths(
        [_plain_turns(tmp_path / "run.jsonl"), *_export_bundle(tmp_path / "export")], store, redact_secrets=False
    )
    with duckdb.connect(str(path)) as con:
        for table in ("imported_summaries", "session_summaries"):
            con.execute(
                f"UPDATE {table} SET title = replace(title, ?, 'x'), summary = replace(summary, ?, 'x')", [GH, GH]
            )
        con.execute("UPDATE schema_meta SET version = 16")
    return store


@pytest.mark.integration  # an older store migrated in place
def test_migration_17_redacts_the_rejects_and_imported_texts_stored_before(tmp_path, monkeypatch):
    monkeypatch.delenv("DIGEST_REDACT", raising=False)
    path = tmp_path / "old.duckdb"
    store = _version_16_store(path, tmp_path)
    assert _holding(store, STRIPE) == ["rejects.excerpt"]
    assert set(_holding(store, GH)) >= {
        "rejects.reason",
        "imported_summaries.metadata",
        "imported_graph_nodes.properties",
    }

    DigestStore(path).migrate()

    assert _holding(store, STRIPE) == [] and _holding(store, GH) == []
    with duckdb.connect(str(path), read_only=True) as con:
        [(reason, text)] = con.execute(
            "SELECT reason, excerpt FROM rejects WHERE line_no = 2 AND source_file LIKE '%run.jsonl'"
        ).fetchall()
        properties = con.execute("SELECT properties FROM imported_graph_nodes").fetchone()[0]
    assert reason.startswith("bad-timestamp") and "STRIPE_KEY=[REDACTED:" in text
    assert json.loads(properties) == {"note": "token [REDACTED:github-token]"}


@pytest.mark.integration  # an older store migrated in place
def test_migration_17_with_redaction_off_leaves_the_rejects(tmp_path, monkeypatch):
    monkeypatch.setenv("DIGEST_REDACT", "off")
    path = tmp_path / "old.duckdb"
    store = _version_16_store(path, tmp_path)
    DigestStore(path).migrate()
    assert _holding(store, STRIPE) == ["rejects.excerpt"]


def test_a_secret_the_excerpts_cut_would_split_is_redacted_whole(store, tmp_path):
    """The excerpt is cut to 200 characters after its redaction read the line around it: a key
    that starts before the cut and ends after it leaves none of its characters."""
    line = {"id": "c-1", "session_id": "c", "timestamp": "soon", "response": "ok", "prompt": "x" * 100 + f" {STRIPE}"}
    log = tmp_path / "cut.jsonl"
    log.write_text(json.dumps(line) + "\n", encoding="utf-8")
    ingest_paths([log], store)
    with store.file.connect() as con:
        [(text,)] = con.execute("SELECT excerpt FROM rejects").fetchall()
    assert len(text) == 200 and "[REDACTED:" in text and STRIPE[8:14] not in text


def test_a_json_text_is_redacted_whole_and_stays_json():
    # A key and its value apart in JSON are found as a text's are.
    text = json.dumps({"client_secret": "Zq8vN3mK1pL7", "n": 1})
    assert json.loads(redact_json(text)) == {"client_secret": "[REDACTED:assigned-secret]", "n": 1}
    # A value that runs into an escaped quote would break the JSON whole: then each string apart.
    text = json.dumps({"cmd": 'curl -u admin:Tr0ub4dor3"x https://ci'})
    assert json.loads(redact_json(text)) == {"cmd": 'curl -u admin:[REDACTED:cli-password]"x https://ci'}
    assert redact_json('{"plain": "text"}') == '{"plain": "text"}'
