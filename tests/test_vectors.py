"""Embeddings kept as numbers (resources/store/vectors.py): float32-origin vectors in FLOAT[], others
as their text; value-exact through ingest, archive and restore; malformed ones dropped with their
reason; an older store's text vectors migrated in place."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

import resources.store.migrations as migrations
from digest.ingest import ingest_paths
from resources.store import DigestStore
from resources.store.vectors import migrate_text_vectors, parse_vector_sql, vector_json_sql


def f32_values(n: int, seed: int = 5) -> list[float]:
    """A float32 vector as Neo's export writes it: each value the double of a float32."""
    return np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32).tolist()


def f64_values(n: int, seed: int = 6) -> list[float]:
    return np.random.default_rng(seed).uniform(-1, 1, n).tolist()  # 17-digit doubles: not float32


def bits(values: list[float]) -> list[int]:
    """Each double's bit pattern: equality that tells -0.0 from 0.0."""
    return np.asarray(values, dtype=np.float64).view(np.int64).tolist()


def memory_line(turn_id: str, session: str, vector_text: str | None) -> str:
    row = {
        "id": turn_id,
        "embedding": None,
        "metadata": {
            "sessionId": session,
            "timestamp": 1_760_000_000_000 + int(turn_id.rsplit("-", 1)[-1]) * 1000,
            "type": "agent-interaction",
            "prompt": f"prompt {turn_id}",
            "thought": "t",
            "response": f"response {turn_id}",
        },
        "document": f"document of {turn_id}",
    }
    line = json.dumps(row)
    return line if vector_text is None else line.replace('"embedding": null', f'"embedding": {vector_text}', 1)


def write_memory(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def stored(store: DigestStore, table: str = "turns", key: str = "id") -> dict:
    with store.file.connect(read_only=True) as con:
        return {
            r[0]: (r[1], r[2]) for r in con.execute(f"SELECT {key}, embedding, embedding_f32 FROM {table}").fetchall()
        }


def archived_vectors(bundle: Path) -> dict[str, list]:
    memory = next(bundle.glob("memory-backup-*.jsonl"))
    return {row["id"]: row["embedding"] for row in map(json.loads, memory.read_text().splitlines())}


# --- DuckDB's reading and writing of the numbers ----------------------------------------------


def test_every_float32_is_written_as_a_decimal_that_reads_back_as_the_same_double():
    rng = np.random.default_rng(1)
    patterns = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    edges = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF]
    edges += [0x3F800000, 0x3DCCCCCD, 0x33D6BF95, 0x4B800000, 0x5F800000, 0x60AD78EC]  # 1, 0.1, 1e-7, 2^24, 2^64, 1e20
    values = np.concatenate([patterns, np.array(edges, dtype=np.uint32)]).view(np.float32)
    values = values[np.isfinite(values)].astype(np.float64).tolist()
    con = duckdb.connect()
    chunk = 4096
    for start in range(0, len(values), chunk):
        part = values[start : start + chunk]
        text = con.execute(
            f"SELECT {vector_json_sql('v')} FROM (SELECT NULL::VARCHAR AS embedding, ?::FLOAT[] AS embedding_f32) v",
            [part],
        ).fetchone()[0]
        assert bits(json.loads(text)) == bits(part)


def test_the_json_reader_parses_each_number_as_pythons_json_does():
    rng = np.random.default_rng(2)
    texts = [repr(float(x)) for x in rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 40, 5000)]
    texts += ["0.1000000000000000055511151231257827021181583404541015625", "2.2250738585072011e-308", "5e-324"]
    texts += ["9007199254740993", "1.00000000000000011102230246251565404236316680908203125", "-0", "1E+5", "3"]
    con = duckdb.connect()
    got = con.execute(f"SELECT {parse_vector_sql('?')}", ["[" + ", ".join(texts) + "]"]).fetchone()[0]
    # As a JSON reader takes each number: `-0`, an integer, is 0 (JSON.stringify writes -0 as `0`).
    assert bits(got) == bits([float(json.loads(t)) for t in texts])


# --- ingest ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dimensions", [4096, 7, 1, 4095])
def test_float32_vectors_are_numbers_and_float64_ones_keep_their_text(store, tmp_path, dimensions):
    f32, f64 = f32_values(dimensions), f64_values(dimensions)
    f64_text = json.dumps(f64)
    path = write_memory(
        tmp_path / "memory-backup-a.jsonl",
        [memory_line("t-1", "s1", json.dumps(f32)), memory_line("t-2", "s1", f64_text), memory_line("t-3", "s1", None)],
    )
    report = ingest_paths([path], store)
    assert (report.vectors, report.vectors_dropped, report.files[0].dimensions) == (2, 0, dimensions)
    got = stored(store)
    assert got["t-1"][0] is None and bits(got["t-1"][1]) == bits(f32)
    assert got["t-2"] == (f64_text, None)  # verbatim
    assert got["t-3"] == (None, None)
    with store.file.connect(read_only=True) as con:
        [(kind,)] = con.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'turns' AND column_name = 'embedding_f32'"
        ).fetchall()
    assert kind == "FLOAT[]"


def test_malformed_vectors_are_dropped_with_their_reason(store, tmp_path):
    good = json.dumps(f32_values(4096))
    path = write_memory(
        tmp_path / "memory-backup-bad.jsonl",
        [
            memory_line("t-1", "s1", good),
            memory_line("t-2", "s1", "[NaN" + good[2:]),
            memory_line("t-3", "s1", "[Infinity" + good[good.index(",") :]),
            memory_line("t-4", "s1", "[1e999" + good[good.index(",") :]),
            memory_line("t-5", "s1", "[]"),
            memory_line("t-6", "s1", json.dumps(f32_values(4095))),  # wrong length
            memory_line("t-7", "s1", json.dumps(f32_values(4097))),
        ],
    )
    [f] = ingest_paths([path], store).files
    assert (f.rows, f.vectors, f.vectors_dropped) == (7, 1, 6)
    assert f.vector_problems == [
        "line 2: bad-embedding: holds something other than numbers",
        "line 3: bad-embedding: holds something other than numbers",
        "line 4: non-finite-values: a number JSON readers take as Infinity",
        "line 5: empty-embedding: no numbers",
        "line 6: wrong-length: 4095 numbers, the file's vectors have 4096",
        "line 7: wrong-length: 4097 numbers, the file's vectors have 4096",
    ]
    got = stored(store)
    assert [t for t, v in got.items() if v != (None, None)] == ["t-1"]


# --- archive and restore ----------------------------------------------------------------------


@pytest.mark.integration  # an archive written
def test_an_imported_summarys_vector_goes_back_exact(store, tmp_path):
    f32 = f32_values(16)
    summary = {
        "id": "summary_s1",
        "embedding": f32,
        "metadata": {"sessionId": "s1", "memoryCount": 1, "title": "T", "sourceTier": "raw"},
        "document": "The agent did things.",
    }
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "summaries-backup-x.jsonl").write_text(json.dumps(summary) + "\n")
    write_memory(tmp_path / "in" / "memory-backup-x.jsonl", [memory_line("t-1", "s1", json.dumps(f32_values(16)))])
    ingest_paths([tmp_path / "in"], store)
    assert stored(store, "imported_summaries", "session_id")["s1"][0] is None
    bundle = Path(store.archive.write_archive(tmp_path / "archives")["path"])
    [line] = next(bundle.glob("summaries-backup-*.jsonl")).read_text().splitlines()
    assert bits(json.loads(line)["embedding"]) == bits(f32)


# --- a store from before numeric vectors ----------------------------------------------------------


def make_old_store(path: Path, turn_vectors: dict[str, str | None], summary_vector: str) -> DigestStore:
    """A store as the code before `embedding_f32` left it: vectors as text in `embedding`."""
    store = DigestStore(path)
    store.migrate()
    with store.file.transaction() as con:
        for table in ("turns", "imported_summaries"):
            con.execute(f"ALTER TABLE {table} DROP COLUMN embedding_f32")
        con.execute("UPDATE schema_meta SET version = 3")  # the version before numeric vectors
        for i, (turn_id, text) in enumerate(turn_vectors.items()):
            con.execute(
                "INSERT INTO turns (id, session_id, ts_ms, document, document_rebuilt, source_file, source_line, "
                "ingested_at, embedding) VALUES (?, 's1', ?, 'doc', false, 'f', ?, now(), ?)",
                [turn_id, i, i + 1, text],
            )
        con.execute(
            "INSERT INTO imported_summaries (session_id, source_file, imported_at, embedding) VALUES ('s1', 'f', now(), ?)",
            [summary_vector],
        )
    migrations._current.clear()
    return store


@pytest.mark.integration  # an older store migrated in place
def test_an_older_stores_text_vectors_are_converted_in_place_nothing_lost(tmp_path):
    texts = {
        "f32": json.dumps(f32_values(4096)),
        "f32-odd": json.dumps(f32_values(33)),
        "f64": json.dumps(f64_values(4096)),
        "not-numbers-to-duckdb": "[1-2, 3]",  # passed the old check: kept as text, as it was
        "none": None,
    }
    summary_text = json.dumps(f32_values(4096, seed=9))
    store = make_old_store(tmp_path / "old.duckdb", texts, summary_text)
    store.migrate()

    got = stored(store)
    assert got["f32"][0] is None and bits(got["f32"][1]) == bits(json.loads(texts["f32"]))
    assert got["f32-odd"][0] is None and bits(got["f32-odd"][1]) == bits(json.loads(texts["f32-odd"]))
    assert got["f64"] == (texts["f64"], None)
    assert got["not-numbers-to-duckdb"] == ("[1-2, 3]", None)
    assert got["none"] == (None, None)
    summary = stored(store, "imported_summaries", "session_id")["s1"]
    assert summary[0] is None and bits(summary[1]) == bits(json.loads(summary_text))
    # Every vector reads back as the values its text held.
    with store.file.connect(read_only=True) as con:
        back = dict(con.execute(f"SELECT id, {vector_json_sql()} FROM turns").fetchall())
    for turn_id, text in texts.items():
        if text is None or turn_id == "not-numbers-to-duckdb":
            assert back[turn_id] == text
        else:
            assert bits(json.loads(back[turn_id])) == bits(json.loads(text))
    # Once: a second migrate finds the column and converts nothing.
    with store.file.transaction() as con:
        assert migrate_text_vectors(con) == {}
