"""The realistic corpus (tests/realistic_corpus.py) in its agents' own log formats, through the
readers into a store. Integration, as the other reader tests: it writes and ingests whole logs."""

from __future__ import annotations

from digest.ingest import ingest_paths
from tests.realistic_corpus import draw_plan, write_corpus


def test_the_harness_formats_ingest_whole(tmp_path, store):
    """Each session in its agent's log format (Claude Code, Codex CLI, aider, SWE-agent): every
    session arrives, no line is a reject."""
    small = [i for i in range(60) if sum(draw_plan(9, i).turn_bytes) < 30_000][:8]
    write_corpus(tmp_path / "logs", sessions=max(small) + 1, seed=9, harness=True)
    aider = tmp_path / "logs" / ".aider.chat.history.md"
    for path in tmp_path.joinpath("logs").iterdir():
        if path != aider and not any(f"rt-9-{i:05d}" in path.name for i in small):
            path.unlink()  # the larger sessions' files: a quick test
    report = ingest_paths([tmp_path / "logs"], store)
    assert report.rejects == 0
    assert {f.kind for f in report.files} == {"claude-code", "codex", "aider", "trajectory"}
    # The small ones, and the aider history's other sessions.
    assert len(report.sessions) >= len(small)
