"""Property-based tests of the line reader: every physical line of every file is accounted for
exactly once, as kept, rejected (at its own 1-based line number), superseded or skipped, and the
store holds exactly the kept turns, each with its session's row.

Files mix valid rows (memory-backup and the simple turn format) with junk, blank lines, a BOM,
CRs, invalid UTF-8, repeated turn ids, odd ids and bad timestamps, through the real ingest into a
real DuckDB file.
"""

from __future__ import annotations

import json
import random
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from digest.ingest import IngestReport, ingest_paths
from digest.turns import partition_key
from resources.store import DigestStore
from tests.test_ingest import rows
from tests.test_ingest_bundles import ODD_SESSION_IDS

BOM = b"\xef\xbb\xbf"
MARK = "@@MARK@@"  # where a line kind puts its bad bytes; no generated id holds an `@`
KINDS = ("row", "row", "row", "row", "junk", "blank", "bad-timestamp", "bad-utf8", "raw-cr", "no-id")
GOOD_TIMESTAMPS = (1_760_000_000_000, "2025-06-01T10:00:00Z", "1760000000000", None, 12.5)
BAD_TIMESTAMPS = ("not a time", [1], True, 1e30, "Infinity", {"ms": 1})
BAD_BYTES = (b"\xff", b"\xfe", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80")
BLANKS = (b"", b"  ", b"\r", b"\t \r")


@dataclass(frozen=True)
class Line:
    data: bytes  # the physical line, without its `\n`
    outcome: str  # turn | reject | skip
    turn_id: str | None = None
    session_id: str | None = None


def build_line(kind: str, fmt: str, turn_id: str, session_id: str, variant: int, junk: bytes) -> Line:
    """One physical line of a `fmt` ("memory" or "turns") file, and what the ingest must make of it."""
    if kind == "blank":
        return Line(BLANKS[variant % len(BLANKS)], "skip")
    if kind == "junk":
        data = junk.replace(b"\n", b"")
        if data.startswith(BOM):
            data = b"x" + data
        return Line(data, "reject" if data.strip(b" \t\r\n") else "skip")
    ts = (
        BAD_TIMESTAMPS[variant % len(BAD_TIMESTAMPS)]
        if kind == "bad-timestamp"
        else GOOD_TIMESTAMPS[variant % len(GOOD_TIMESTAMPS)]
    )
    row_id = ("", "  ")[variant % 2] if kind == "no-id" else turn_id
    prompt = f"prompt {MARK}" if kind in ("bad-utf8", "raw-cr") else f"prompt of {turn_id}"
    if fmt == "memory":
        row: dict = {"id": row_id}
        if variant & 1:
            row["embedding"] = [0.25, -1.5e-05, 3.0, 7]
        row["metadata"] = {"sessionId": session_id, "timestamp": ts, "prompt": prompt, "thought": "t", "response": "r"}
        if variant & 2:
            row["document"] = f"document of {turn_id}"
    else:
        row = {"id": row_id, "session_id": session_id, "timestamp": ts, "prompt": prompt, "response": "r"}
    # CRs between tokens are JSON whitespace; a CRLF line end is one too.
    separators = (",\r ", ": ") if variant & 4 else (", ", ": ")
    data = json.dumps(row, ensure_ascii=bool(variant & 8), separators=separators).encode()
    if variant & 16:
        data += b"\r"
    if kind == "bad-utf8":
        return Line(data.replace(MARK.encode(), BAD_BYTES[variant % len(BAD_BYTES)]), "reject")
    if kind == "raw-cr":
        return Line(data.replace(MARK.encode(), b"one\rtwo"), "reject")
    if kind in ("bad-timestamp", "no-id"):
        return Line(data, "reject")
    return Line(data, "turn", turn_id, session_id)


def write_file(path: Path, lines: list[Line], bom: bool, final_newline: bool) -> Path:
    # Without a final `\n`, an empty last line would be no line at all.
    final = final_newline or lines[-1].data == b""
    path.write_bytes((BOM if bom else b"") + b"\n".join(line.data for line in lines) + (b"\n" if final else b""))
    return path


def check_accounting(db: DigestStore, files: list[tuple[Path, list[Line]]], report: IngestReport) -> None:
    kept: dict[str, tuple[str, int]] = {}  # the last valid line of each turn id wins
    sessions: dict[str, str] = {}
    superseded: set[tuple[str, int]] = set()
    rejected: set[tuple[str, int]] = set()
    for path, lines in files:
        for line_no, line in enumerate(lines, start=1):
            where = (str(path.resolve()), line_no)
            if line.outcome == "turn":
                if line.turn_id in kept:
                    superseded.add(kept[line.turn_id])
                kept[line.turn_id], sessions[line.turn_id] = where, line.session_id
            elif line.outcome == "reject":
                rejected.add(where)

    stored = {r["id"]: r for r in rows(db, "SELECT id, session_id, source_file, source_line FROM turns")}
    assert {i: (r["source_file"], r["source_line"]) for i, r in stored.items()} == kept
    assert {i: r["session_id"] for i, r in stored.items()} == sessions
    reasons = {(r["source_file"], r["line_no"]): r["reason"] for r in rows(db, "SELECT * FROM rejects")}
    assert set(reasons) == rejected | superseded
    assert {w for w, reason in reasons.items() if reason.startswith("superseded:")} == superseded

    assert [Path(f.path) for f in report.files] == [p.resolve() for p, _ in files]
    for (path, lines), counted in zip(files, report.files):
        here = str(path.resolve())
        assert counted.lines == len(lines)
        assert counted.rows == sum(1 for w in kept.values() if w[0] == here)
        assert counted.superseded == sum(1 for w in superseded if w[0] == here)
        assert counted.rejects == sum(1 for w in rejected if w[0] == here)
        assert counted.skipped == sum(1 for line in lines if line.outcome == "skip")
        assert counted.lines == counted.rows + counted.rejects + counted.superseded + counted.skipped
    assert report.turns == len(stored) and report.superseded == len(superseded)

    # Every stored turn has its session's row, which counts exactly the turns it holds.
    counts = {r["session_id"]: r for r in rows(db, "SELECT session_id, partition_key, turn_count FROM sessions")}
    expected = {sid: list(sessions.values()).count(sid) for sid in set(sessions.values())}
    assert {sid: r["turn_count"] for sid, r in counts.items()} == expected
    assert all(r["partition_key"] == partition_key(sid) for sid, r in counts.items())


def ingest_and_check(files: list[tuple[list[Line], str, bool, bool]]) -> int:
    """Write the files into a fresh folder and store, ingest them, check; returns the line count."""
    with tempfile.TemporaryDirectory() as tmp:
        db = DigestStore(Path(tmp) / "digest.duckdb")
        db.migrate()
        written = []
        for i, (lines, fmt, bom, final_newline) in enumerate(files):
            name = f"memory-backup-{i:02d}.jsonl" if fmt == "memory" else f"harness-{i:02d}.jsonl"
            written.append((write_file(Path(tmp) / name, lines, bom, final_newline), lines))
        report = ingest_paths([p for p, _ in written], db)  # no exception may escape
        check_accounting(db, written, report)
        return sum(len(lines) for _, lines in written)


# --- hypothesis ------------------------------------------------------------------------------

odd_text = st.text(st.characters(exclude_characters="@"), min_size=1, max_size=80).filter(str.strip)
turn_ids = st.one_of(st.sampled_from([f"t{i}" for i in range(6)]), odd_text)  # few ids: many repeats
session_ids = st.one_of(st.sampled_from(ODD_SESSION_IDS), odd_text)


@st.composite
def files(draw) -> list[tuple[list[Line], str, bool, bool]]:
    out = []
    for _ in range(draw(st.integers(1, 2))):
        fmt = draw(st.sampled_from(["memory", "turns"]))
        line = st.builds(
            build_line,
            st.sampled_from(KINDS),
            st.just(fmt),
            turn_ids,
            session_ids,
            st.integers(0, 31),
            st.binary(max_size=40),
        )
        out.append((draw(st.lists(line, min_size=1, max_size=40)), fmt, draw(st.booleans()), draw(st.booleans())))
    return out


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(files())
def test_every_line_is_kept_rejected_superseded_or_skipped(generated):
    ingest_and_check(generated)


# Ids near the hashed shape: safe characters, `-`, hex digits, and a few unsafe ones.
near_hashed = st.text(st.sampled_from("ab_-.0123456789cdef:é"), max_size=70)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(near_hashed, st.text(max_size=120)), unique=True, max_size=30))
def test_partition_keys_are_safe_and_never_shared(session_ids):
    # Each id's hashed key, as an id of its own: the adversary of a kept-as-is key.
    ids = set(session_ids) | {partition_key(sid) for sid in session_ids}
    keys = {sid: partition_key(sid) for sid in ids}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", k) for k in keys.values())
    assert len(set(keys.values())) == len(ids)
    for sid, key in keys.items():
        if key != sid:  # a hashed key is never some other id kept as it is
            assert partition_key(key) != key


# --- a seeded fuzzed export ------------------------------------------------------------------

FUZZ_CHARS = "abcXYZ019_-.,:/\\ \t\"'é日😀\u0301\x00\x7f{}[]"


def fuzzed_export(seed: int, lines: int) -> list[tuple[list[Line], str, bool, bool]]:
    """About `lines` lines over five files, ids from pools small enough to repeat across batches."""
    rng = random.Random(seed)

    def odd_id(prefix: str) -> str:
        return prefix + "".join(rng.choice(FUZZ_CHARS) for _ in range(rng.randint(0, 70)))

    turn_pool = [f"turn-{i}" for i in range(2500)] + [odd_id("t") for _ in range(500)]
    session_pool = [f"session-{i}" for i in range(200)] + [odd_id("s") for _ in range(100)] + ODD_SESSION_IDS
    out = []
    for i in range(5):
        fmt = "memory" if i % 3 != 2 else "turns"
        body = [
            build_line(
                rng.choice(KINDS), fmt, rng.choice(turn_pool), rng.choice(session_pool), rng.randrange(32),
                rng.randbytes(rng.randrange(41)),
            )
            for _ in range(lines // 5)
        ]  # fmt: skip
        out.append((body, fmt, i % 2 == 0, i != 4))
    return out


def test_a_fuzzed_ten_thousand_line_export_is_fully_accounted_for():
    assert ingest_and_check(fuzzed_export(seed=1714, lines=10_000)) == 10_000
