"""4096-float vectors through archive and restore, value for value (issue 20.1): whole stores
written, restored twice and archived again, so in the integration tier."""

from __future__ import annotations

import json
from pathlib import Path

from digest.archive_read import validate_bundle
from digest.ingest import ingest_paths
from resources.store import DigestStore
from tests.bundle_edits import reseal
from tests.test_vectors import archived_vectors, bits, f32_values, f64_values, memory_line, stored, write_memory


def test_the_round_trip_through_archive_and_restore_is_value_exact(tmp_path):
    source = DigestStore(tmp_path / "a.duckdb")
    source.migrate()
    vectors = {
        "t-1": json.dumps(f32_values(4096, seed=1)),
        "t-2": json.dumps(f32_values(4096, seed=2)),
        "t-3": json.dumps(f64_values(4096)),  # float64 origin: text, verbatim
        "t-4": "[" + ",".join(["-0.0", "1.401298464324817e-45", "3.4028234663852886e+38"] + ["0.5"] * 4093) + "]",
        "t-5": "["
        + ",".join(
            ["1.401298464324817e-45", "3.4028234663852886e+38", "-1.1754943508222875e-38", "1.0000000200408773e+20"]
            * 1024
        )
        + "]",
    }
    path = write_memory(
        tmp_path / "in" / "memory-backup-x.jsonl", [memory_line(k, "s1", v) for k, v in vectors.items()]
    )
    ingest_paths([path], source)
    # t-4 holds a negative zero: its text is kept (DuckDB's upsert would store 0.0).
    assert {k for k, (text, numbers) in stored(source).items() if numbers is not None} == {"t-1", "t-2", "t-5"}

    bundle = Path(source.archive.write_archive(tmp_path / "archives")["path"])
    written = archived_vectors(bundle)
    # The bundle's numbers parse to exactly the values the export held, bit for bit.
    assert {k: bits(v) for k, v in written.items()} == {k: bits(json.loads(v)) for k, v in vectors.items()}
    assert f'"embedding":{vectors["t-3"]},' in next(bundle.glob("memory-backup-*.jsonl")).read_text()

    for mode in ("merge", "replace"):
        target = DigestStore(tmp_path / f"b-{mode}.duckdb")
        target.migrate()
        target.archive.restore_archive(validate_bundle(bundle), mode)
        assert stored(target) == stored(source)
        again = Path(target.archive.write_archive(tmp_path / f"again-{mode}")["path"])
        assert (
            next(again.glob("memory-backup-*.jsonl")).read_bytes()
            == next(bundle.glob("memory-backup-*.jsonl")).read_bytes()
        )

    # Ingesting the bundle (as an export) stores the same too.
    fresh = DigestStore(tmp_path / "c.duckdb")
    fresh.migrate()
    ingest_paths([bundle], fresh)
    assert stored(fresh) == stored(source)


def test_a_bundle_from_before_numeric_vectors_restores_into_numbers(store, tmp_path):
    """An older bundle's table file holds an imported summary's vector as text (no embedding_f32)."""
    f32 = f32_values(64, seed=3)
    summary = {"id": "summary_s1", "embedding": f32, "metadata": {"sessionId": "s1", "memoryCount": 1}, "document": "d"}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "summaries-backup-x.jsonl").write_text(json.dumps(summary) + "\n")
    write_memory(tmp_path / "in" / "memory-backup-x.jsonl", [memory_line("t-1", "s1", json.dumps(f32_values(64)))])
    ingest_paths([tmp_path / "in"], store)
    bundle = Path(store.archive.write_archive(tmp_path / "archives")["path"])
    # Rewrite the table file and its manifest entry as the code before embedding_f32 wrote them.
    manifest = json.loads((bundle / "manifest.json").read_text())
    [entry] = [f for f in manifest["files"] if f.get("table") == "imported_summaries"]
    entry["columns"] = [c for c in entry["columns"] if c[0] != "embedding_f32"]
    table_file = bundle / entry["name"]
    rows = [json.loads(line) for line in table_file.read_text().splitlines()]
    for row in rows:
        row["embedding"] = json.dumps(row.pop("embedding_f32"))
    table_file.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    reseal(bundle)

    target = DigestStore(tmp_path / "new.duckdb")
    target.migrate()
    target.archive.restore_archive(validate_bundle(bundle), "merge")
    restored = stored(target, "imported_summaries", "session_id")["s1"]
    assert restored[0] is None and bits(restored[1]) == bits(f32)
