"""What the reader tests share: the fixture sets of `tests/fixtures/harnesses/` (written by its
`generate.py`), a file read by the reader `file_kind` picks, and a store's rows as plain values."""

from __future__ import annotations

from pathlib import Path

from digest.readers import READERS, file_kind
from digest.readers.common import Read
from resources.store import DigestStore

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harnesses"


def read_file(path: Path) -> list[Read]:
    """Every line's outcome, as the ingest gets them; each line accounted for exactly once."""
    with path.open("rb") as handle:
        reads = list(READERS[file_kind(path)](enumerate(handle, start=1), str(path)))
    counted = sorted(read.line_no for read in reads)
    assert counted == list(range(1, len(path.read_bytes().splitlines()) + 1)), counted
    return reads


def turns(path: Path) -> list[dict]:
    return [read.row for read in read_file(path) if read.outcome == "turn"]


def rows(db: DigestStore, sql: str, params: list | None = None) -> list[dict]:
    with db.file.connect(read_only=True) as con:
        cursor = con.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
