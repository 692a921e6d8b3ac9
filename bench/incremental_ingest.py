"""What a growing session costs to keep up with: one turn appended to a large Claude Code session
file, read incrementally (`digest.manifest`) against the same file read again whole; and a watch
tick over many unchanged files (the inbox sensor's walk and stats, and the ingest's manifest check).

Run: .venv/bin/python bench/incremental_ingest.py [--megabytes 50] [--files 1000]

1. A Claude Code session of `--megabytes` MB (turns of ~10 KB: a prompt, three tool calls with
   their results, an answer) is ingested into a fresh DuckDB store; then one turn is appended and
   the file ingested again (incremental: the prefix hashed, the last turn and the new one parsed),
   and, side by side, the same grown file read whole (its manifest row dropped first). Also the
   SHA-256 of the file's read part alone, which the incremental read pays to know its prefix intact,
   and the refresh of the session's row alone, which every write of its turns pays (its input
   revision over all its turns; its fidelity terms summed from its turns' `terms`, no turn
   read again while it has no summary).
2. `--files` small session files in a `~/.claude/projects` layout (one folder per project, ten
   sessions each), ingested once and back-dated past the racy window; then, best of 3: the inbox
   sensor's tick with them all done (walk, stat, cursor; in a real Dagster instance with
   `DIGEST_WATCH` set), and an ingest of the folder (walk, stat, one manifest query: nothing read).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from dagster import DagsterRunStatus, build_sensor_context, instance_for_test

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digest.ingest import ingest_paths  # noqa: E402
from digest.manifest import prefix_hash  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from pipelines.definitions import build_definitions  # noqa: E402
from pipelines.sensors import inbox_sensor  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.harness_homes import PROJECT, claude_turn, write_lines  # noqa: E402

SESSION = "5f1c2d3e-0000-4000-8000-000000000001"
FILLER = "lorem ipsum dolor sit amet " * 90  # ~2.4 KB a tool result


def _age(path: Path) -> None:
    past = time.time() - 3600
    os.utime(path, (past, past))


def _timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def appended_turn(folder: Path, megabytes: float) -> None:
    path = folder / PROJECT / f"{SESSION}.jsonl"
    turn_bytes = len("\n".join(claude_turn(SESSION, 1, tools=3, text=FILLER))) + 1
    turns = max(2, int(megabytes * 1e6 / turn_bytes))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for n in range(1, turns + 1):
            f.write("".join(line + "\n" for line in claude_turn(SESSION, n, tools=3, text=FILLER)))
    size = path.stat().st_size
    store = DigestStore(folder / "digest.duckdb")
    store.migrate()
    first, whole_first = _timed(lambda: ingest_paths([path], store))
    _age(path)
    write_lines(path, claude_turn(SESSION, turns + 1, tools=3, text=FILLER), mode="a")
    incremental, report = _timed(lambda: ingest_paths([path], store))
    (read,) = report.files
    with store.file.connect() as con:
        con.execute("DELETE FROM ingest_files")
    whole, again = _timed(lambda: ingest_paths([path], store))
    (whole_read,) = again.files
    hashed, _ = _timed(lambda: prefix_hash(path, size))
    refreshed, _ = _timed(lambda: store.ingest.refresh_sessions([SESSION]))
    print(
        f"\n1. One turn appended to a {size / 1e6:.1f} MB Claude Code session ({turns} turns of {turn_bytes / 1e3:.1f} KB)"
    )
    print("| read | lines parsed | seconds |\n|---|---|---|")
    print(f"| first ingest (whole) | {whole_first.files[0].lines} | {first:.3f} |")
    print(f"| incremental ({read.read} from line {read.from_line}) | {read.lines} | {incremental:.3f} |")
    print(f"| the grown file read whole | {whole_read.lines} | {whole:.3f} |")
    print(f"| of the incremental: SHA-256 of the read part | - | {hashed:.3f} |")
    print(f"| of each: the session's refresh (its row, revision, fidelity terms) | - | {refreshed:.3f} |")
    print(f"ratio (whole / incremental): {whole / incremental:.1f}x")


def watch_tick(folder: Path, files: int) -> None:
    projects = folder / "projects"
    for i in range(files):
        session = f"00000000-0000-4000-8000-{i:012d}"
        _age(write_lines(projects / f"-home-dev-p{i // 10:04d}" / f"{session}.jsonl", claude_turn(session, 1)))
    home = folder / "digest-home"
    settings = load_settings(
        {"DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_WATCH": str(projects)}
    )
    store = DigestStore(settings.db_path)
    store.migrate()
    ingest_paths([projects], store)
    for path in projects.rglob("*.jsonl"):
        _age(path)
    definitions = build_definitions(settings)
    resources = definitions.resources
    with instance_for_test() as instance:

        def tick(cursor=None):
            with build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
                return inbox_sensor(context)

        first = tick()
        (request,) = first.run_requests
        job = definitions.resolve_job_def("ingest")
        instance.create_run_for_job(
            job, run_config=request.run_config, tags=request.tags, status=DagsterRunStatus.SUCCESS
        )
        done = tick(first.cursor)
        sensor_s = min(_timed(lambda: tick(done.cursor))[0] for _ in range(3))
    ingest_s, report = min((_timed(lambda: ingest_paths([projects], store)) for _ in range(3)), key=lambda t: t[0])
    assert report.files == [] and report.unchanged == files, report
    print(f"\n2. A watch tick over {files:,} unchanged session files (best of 3)")
    print("| step | seconds | per file, ms |\n|---|---|---|")
    print(f"| inbox sensor tick (walk, stat, cursor) | {sensor_s:.3f} | {1000 * sensor_s / files:.3f} |")
    print(f"| ingest of the folder (walk, stat, manifest) | {ingest_s:.3f} | {1000 * ingest_s / files:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=50.0)
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        appended_turn(Path(tmp) / "one", args.megabytes)
        watch_tick(Path(tmp) / "many", args.files)


if __name__ == "__main__":
    main()
