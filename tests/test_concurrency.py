"""Concurrent sweeps on one store: four `session-digest sweep` processes and an `ingest` at once,
as a user (or cron) may start them. Real DuckDB file, real Dagster instance, real HTTP to a model
server that counts what it is asked, response cache off so nothing hides a repeated call."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, RunsFilter

from digest.prompts import SUMMARY_INSTRUCTIONS
from pipelines.interrupted_runs import IN_FLIGHT
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import Behaviour, ModelServer

CLI = [sys.executable, "-m", "app.cli"]
SWEEPS = 4
FIRST, SECOND = 8, 2  # sessions in the bundle ingested first, and in the one ingested during the sweeps
# Four model steps at once, so runs of one session truly overlap and meet at the lease. (The CLI's
# default of 1 serializes them, and Dagster polls a blocked step up to 15 s apart: too slow here.)
POOL = 4
FAILING = "c05"  # the model answers its summary with a reply that does not parse: the session's failure


def _turns(prefix: str, count: int):
    """Sessions whose documents name them, so the server can tell whose summary it is asked for."""
    return [
        dataclasses.replace(t, document=f"{t.document} [{t.session_id}]")
        for i in range(count)
        for t in make_turns(f"{prefix}{i:02d}", 2, minis=2)
    ]


class CountingModel:
    """Counts summary requests per session; answers each after a short delay, so runs overlap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.summaries: Counter[str] = Counter()
        self.server = ModelServer(self.script)

    def script(self, received) -> Behaviour:
        named = re.search(r"\[([cd]\d\d)\]", received.prompt)
        session = named.group(1) if named else "unnamed"
        if SUMMARY_INSTRUCTIONS[:40] in received.prompt:
            with self.lock:
                self.summaries[session] += 1
        if session == FAILING:
            # Not a 500: a host's failure would not back the session off, and the sweeps would ask again.
            return Behaviour.text("no json here")
        return Behaviour(content=Behaviour.reply().content, delay_s=0.05)


def _env(home: Path, url: str) -> dict:
    return {
        **project_free_environ(),
        "DIGEST_HOME": str(home),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": url,
        "DIGEST_RESPONSE_CACHE": "off",
        "DIGEST_SWEEP_MAX_SESSIONS": "20",
    }


class Command:
    """The CLI in a subprocess, its output in files: a full pipe would stall it while others wait on it."""

    def __init__(self, folder: Path, name: str, args: list[str], env: dict):
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(CLI + [*args, "--json"], env=env, stdout=out, stderr=err)

    def result(self, timeout: float) -> dict:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.stop()
        err = self.err.read_text()
        assert code == 0, err[-3000:]
        assert not re.search(r"could not set lock|conflicting lock|database is locked", err, re.I), err[-3000:]
        return json.loads(self.out.read_text())

    def stop(self) -> None:
        """A CLI still running when the test gives up is not left behind."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_concurrent_sweeps_and_an_ingest_summarize_each_session_once(tmp_path):
    home = tmp_path / "home"
    first = write_bundle(tmp_path / "first", _turns("c", FIRST))
    second = write_bundle(tmp_path / "second", _turns("d", SECOND), stamp="2026-11-21T09-00-00.000Z")
    model = CountingModel()
    with model.server as server:
        env = _env(home, server.url)
        (home / "dagster").mkdir(parents=True)
        (home / "dagster" / "dagster.yaml").write_text(f"concurrency:\n  pools:\n    default_limit: {POOL}\n")
        logs = tmp_path / "logs"
        logs.mkdir()
        Command(logs, "ingest-first", ["ingest", str(first)], env).result(timeout=120)
        commands = [Command(logs, f"sweep-{i}", ["sweep"], env) for i in range(SWEEPS)]
        commands.append(Command(logs, "ingest-second", ["ingest", str(second)], env))
        try:
            outputs = [command.result(timeout=300) for command in commands]
        finally:
            for command in commands:
                command.stop()
        # The second bundle's sessions, ingested while the sweeps ran.
        outputs.append(Command(logs, "sweep-last", ["sweep"], env).result(timeout=120))
    sweeps = outputs[:SWEEPS] + outputs[-1:]

    store = DigestStore(home / "digest.duckdb")
    summarized = {row["session_id"] for row in store.reports.summary_rows()}
    everyone = {f"c{i:02d}" for i in range(FIRST)} | {f"d{i:02d}" for i in range(SECOND)}
    # Nothing lost: every session has its summary but the one the model fails.
    assert summarized == everyone - {FAILING}
    # Nothing twice: one summary request per session, the failing one included (it backs off).
    duplicates = {s: n for s, n in model.summaries.items() if n != 1}
    assert duplicates == {}, f"{sum(duplicates.values()) - len(duplicates)} duplicate summary calls: {duplicates}"
    assert set(model.summaries) == everyone
    # Every call, and the failure, is in the ledger.
    ledger = store.query("SELECT session_id, outcome FROM attempts WHERE stage = 'session-summary' AND NOT cached")
    assert Counter(ledger["session_id"]) == model.summaries
    assert ledger[ledger["outcome"] != "ok"]["session_id"].tolist() == [FAILING]
    assert store.query("SELECT session_id, failures FROM summary_state").to_dict("records") == [
        {"session_id": FAILING, "failures": 1}
    ]
    # The runs that found the session done (or being done) said so, and failed none; every run is
    # closed and no lease is left.
    assert sum(s["summarized"] for s in sweeps) == len(everyone) - 1
    assert sum(s["nothing_to_do"] for s in sweeps) > 0
    assert [r["partition"] for s in sweeps for r in s["runs"] if not r["success"]] == [FAILING]
    assert store.query("SELECT count(*) AS n FROM summary_leases")["n"][0] == 0
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        assert instance.get_runs_count(filters=RunsFilter(statuses=IN_FLIGHT)) == 0
        materialized = Counter(
            record.partition_key
            for record in instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey("session_summaries")), limit=1000
            ).records
        )
    finally:
        instance.dispose()
    assert materialized == Counter(summarized)  # once each: a run with nothing to do materializes nothing


def _busy(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _ticks_at_once(path: Path, policy, ticks: int = 4) -> tuple[list, list]:
    """`ticks` threads asking a store at `path` (each its own, as each tick builds one) for the
    hosts of a half-open circuit at the same moment: (their answers, their errors)."""
    answers, errors = [], []
    barrier = threading.Barrier(ticks)

    def tick() -> None:
        store = DigestStore(path)
        barrier.wait()
        try:
            answers.append(store.hosts.available_hosts(["gpu-box", "cpu-box"], 60_000, policy))
        except Exception as exc:  # the failure under test, reported by the caller
            errors.append(repr(exc))

    workers = [threading.Thread(target=tick) for _ in range(ticks)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return answers, errors


def test_threads_opening_and_closing_one_store_under_load_all_get_it(tmp_path):
    """A sensor tick's threads and a run's worker share one process: an open of the file racing
    the close of its last connection was refused by DuckDB ("Unique file handle conflict", read as
    a damaged store; 9 rounds in 150 here under this load), and a half-open host's probe was lost."""
    import multiprocessing

    from digest.circuit import CircuitPolicy

    policy = CircuitPolicy(failure_threshold=3, retry_base_s=60.0, retry_max_s=1800.0)
    stop = multiprocessing.Event()
    load = [multiprocessing.Process(target=_busy, args=(stop,)) for _ in range(4)]
    for process in load:
        process.start()
    try:
        for attempt in range(60):
            path = tmp_path / f"s{attempt}.duckdb"
            store = DigestStore(path)
            store.migrate()
            for _ in range(3):
                store.hosts.record_host_outcome("gpu-box", True, "HTTP 500", 0, policy)
            answers, errors = _ticks_at_once(path, policy)
            assert errors == [], (attempt, errors[:1])
            assert sorted(answers) == [["cpu-box"]] * 3 + [["gpu-box", "cpu-box"]], (attempt, answers)
    finally:
        stop.set()
        for process in load:
            process.join()
