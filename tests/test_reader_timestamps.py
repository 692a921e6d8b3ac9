"""A time no `datetime` can hold (past year 9999, before year 1) is rejected at read whatever its
form, epoch milliseconds or seconds as ISO-8601 always was, by every reader that takes times: a
stored one failed its session's summary run on every sweep (`year 10000 is out of range`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from digest.ingest import ingest_paths
from digest.turns import MAX_TS_MS, MIN_TS_MS, parse_timestamp_ms
from tests.harness_fixtures import rows

YEAR_10000_MS = 253_402_300_800_000  # 10000-01-01T00:00:00Z
BEFORE_YEAR_1_MS = -62_135_596_800_001  # a millisecond before 0001-01-01T00:00:00Z


def test_the_range_is_the_one_datetime_holds_in_every_form():
    assert datetime.fromtimestamp(MAX_TS_MS / 1000, UTC).year == 9999
    assert datetime.fromtimestamp(MIN_TS_MS / 1000, UTC) == datetime(1, 1, 1, tzinfo=UTC)
    for value in (MAX_TS_MS, str(MIN_TS_MS), "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z"):
        assert parse_timestamp_ms(value) in (MAX_TS_MS, MIN_TS_MS)
    for value in (YEAR_10000_MS, BEFORE_YEAR_1_MS, str(YEAR_10000_MS), 1e16, "0001-01-01T00:00:00+01:00"):
        with pytest.raises(ValueError, match="out of range: outside years 1 to 9999"):
            parse_timestamp_ms(value)
    assert parse_timestamp_ms(1_761_000_000.25, seconds=True) == 1_761_000_000_250
    assert parse_timestamp_ms("1761000000", seconds=True) == 1_761_000_000_000
    with pytest.raises(ValueError, match="out of range"):
        parse_timestamp_ms(YEAR_10000_MS // 1000, seconds=True)


def _claude(ts) -> dict:
    message = {"role": "user", "content": "fix the build"}
    return {"type": "user", "sessionId": "s-claude", "uuid": f"u-{ts}", "timestamp": ts, "message": message}


def _codex(ts) -> dict:
    payload = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"prompt at {ts}"}]}
    return {"timestamp": ts, "type": "response_item", "payload": payload}


FORMATS = {
    # name: (file name, a line with a timestamp)
    "neo": ("memory-backup-x.jsonl", lambda ts: {"id": f"t{ts}", "metadata": {"sessionId": "s-neo", "timestamp": ts, "prompt": "p", "thought": "t", "response": "r"}}),
    "plain": ("turns.jsonl", lambda ts: {"id": f"t{ts}", "session_id": "s-plain", "timestamp": ts, "prompt": "p", "response": "r"}),
    "claude-code": ("claude.jsonl", _claude),
    "codex": ("rollout-x.jsonl", _codex),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_reader_rejects_an_epoch_time_out_of_range(store, tmp_path, name):
    file_name, line = FORMATS[name]
    path = tmp_path / file_name
    stamps = (1_761_000_000_000, YEAR_10000_MS, BEFORE_YEAR_1_MS, "2026-11-19T14:02:11Z")
    path.write_text("".join(json.dumps(line(ts)) + "\n" for ts in stamps))
    report = ingest_paths([path], store)
    assert report.turns == 2 and report.rejects == 2
    rejects = rows(store, "SELECT line_no, reason FROM rejects ORDER BY line_no")
    assert [r["line_no"] for r in rejects] == [2, 3]
    for reject in rejects:
        assert reject["reason"].startswith("bad-timestamp:")
        assert "out of range: outside years 1 to 9999" in reject["reason"]
    stored = [r["ts_ms"] for r in rows(store, "SELECT ts_ms FROM turns ORDER BY ts_ms")]
    assert stored == [1_761_000_000_000, 1_795_096_931_000]
