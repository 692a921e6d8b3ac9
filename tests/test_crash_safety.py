"""The response cache as durable staging, and crash safety: a sweep killed with SIGKILL at random
points loses no finished summary and duplicates none. Real DuckDB, real HTTP, real Dagster, and the
CLI in a subprocess, as a user runs it."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, materialize

from assets.mini_summaries import turn_mini_summaries
from assets.sessions import raw_sessions, session_summaries
from digest.graph import extraction_json_schema
from digest.ingest import ingest_paths
from digest.model_api import ModelError
from digest.settings import SettingsError, load_settings
from digest.summary_output import response_json_schema
from digest.synthesis import summarize_session
from digest.tags import HOST_TAG, PID_TAG
from pipelines.definitions import build_definitions
from pipelines.instance import write_instance_config
from resources.bindings import ChatModelResource
from resources.model_clients import OpenAIChatClient
from resources.model_hosts import ModelHosts
from resources.response_cache import CachedChatClient, usable_reply
from resources.store import DigestStore, RunLedger
from tests.bundles import write_bundle
from tests.conftest import dead_pid, make_turns, project_free_environ
from tests.model_server import FAITHFUL_SUMMARY, GOOD_SUMMARY, Behaviour, ModelServer

CLI = [sys.executable, "-m", "app.cli"]
SCHEMA = response_json_schema()


def _store(path: Path) -> DigestStore:
    store = DigestStore(path)
    store.migrate()
    return store


def _by_prompt(received) -> Behaviour:
    prompt = received.prompt
    if "fail" in prompt:
        return Behaviour.server_error()
    if "slow" in prompt:
        return Behaviour.hang(1.5)
    if "junk" in prompt:
        return Behaviour.text("no json here")
    if "empty" in prompt:
        return Behaviour.text("   ")
    return Behaviour.reply()


def test_only_usable_replies_are_cached(tmp_path):
    store = _store(tmp_path / "d.duckdb")
    with ModelServer(_by_prompt) as server:
        client = CachedChatClient(OpenAIChatClient(server.url, "m"), store.cache, {"provider": "openai"})

        def ask(prompt, schema=SCHEMA, tokens=256):
            try:
                client.chat(prompt, schema=schema, max_output_tokens=tokens, timeout_s=0.5)
            except ModelError:
                pass  # what counts is what reached the server

        for prompt in ("good", "fail", "slow", "junk"):
            ask(prompt)
            ask(prompt)
        ask("empty", schema=None)
        ask("empty", schema=None)
        ask("plain", schema=None)
        ask("plain", schema=None)
        counts = {}
        for r in server.chat_requests():
            counts[r.prompt] = counts.get(r.prompt, 0) + 1
        # A good reply is asked for once; an error, a timeout or a reply the caller rejects every time.
        assert counts == {"good": 1, "fail": 2, "slow": 2, "junk": 2, "empty": 2, "plain": 1}
        assert store.query("SELECT count(*) AS n FROM response_cache")["n"][0] == 2

        # Anything that shapes the reply is in the key: another output cap or model asks again.
        ask("good", tokens=512)
        CachedChatClient(OpenAIChatClient(server.url, "other-model"), store.cache, {"provider": "openai"}).chat(
            "good", schema=SCHEMA, max_output_tokens=256, timeout_s=5
        )
        assert len([r for r in server.chat_requests() if r.prompt == "good"]) == 3
    # The address is not: the same model on another server (a restore on another host) is not asked.
    with ModelServer(_by_prompt) as moved:
        reply = CachedChatClient(OpenAIChatClient(moved.url, "m"), store.cache, {"provider": "openai"}).chat(
            "good", schema=SCHEMA, max_output_tokens=256, timeout_s=5
        )
        assert moved.chat_requests() == [] and reply.duration_s == 0.0
    assert store.cache.clear_response_cache() == 4


def test_a_reply_is_usable_only_if_its_caller_would_accept_it():
    assert usable_reply(json.dumps(GOOD_SUMMARY), SCHEMA)
    assert not usable_reply(
        json.dumps({**GOOD_SUMMARY, "title": "one two three four five six seven eight nine ten eleven"}), SCHEMA
    )
    assert usable_reply('{"entities": [], "relations": []}', extraction_json_schema())
    assert not usable_reply('{"entities": "none"}', extraction_json_schema())
    assert usable_reply('{"any": 1}', {"type": "object"}) and not usable_reply("{", {"type": "object"})
    assert usable_reply("a line", None) and not usable_reply(" \n", None)


def test_with_reuse_off_a_reply_is_staged_for_its_own_session_only(tmp_path):
    store = _store(tmp_path / "d.duckdb")
    with ModelServer() as server:
        inner = OpenAIChatClient(server.url, "m")

        def ask(session):
            CachedChatClient(inner, store.cache, {"provider": "openai"}, reuse=False, session=session).chat(
                "same prompt", schema=SCHEMA, max_output_tokens=256, timeout_s=5
            )

        ask(None)  # no session: nothing kept
        assert store.query("SELECT count(*) AS n FROM response_cache")["n"][0] == 0
        ask(("s1", "rev-1"))
        ask(("s1", "rev-1"))  # its own rerun: from the staged reply
        ask(("s2", "rev-1"))  # another session: asks
        ask(("s1", "rev-2"))  # the same session, other turns: asks
        assert len(server.chat_requests()) == 4
        store.cache.drop_staged_replies("s1")
        ask(("s1", "rev-2"))
        assert len(server.chat_requests()) == 5


def test_the_response_cache_setting():
    assert load_settings({}).response_cache is True
    assert load_settings({"DIGEST_RESPONSE_CACHE": "off"}).response_cache is False
    with pytest.raises(SettingsError, match="DIGEST_RESPONSE_CACHE='sometimes'"):
        load_settings({"DIGEST_RESPONSE_CACHE": "sometimes"})


def _env(home: Path, url: str, **extra) -> dict:
    return {
        **project_free_environ(),
        "DIGEST_HOME": str(home),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": url,
        **extra,
    }


def _killed_run(instance, settings, key: str):
    """A summary run as a CLI sweep left it when SIGKILL hit: started, never ended, its process gone,
    its step still holding the `model` pool's one slot."""
    job = build_definitions(settings).resolve_job_def("summarize_sessions")
    tags = {
        "dagster/partition": key,
        "digest/sweep": "cli",
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(dead_pid()),
    }
    run = instance.create_run_for_job(job, tags=tags, status=DagsterRunStatus.STARTED)
    instance.event_log_storage.initialize_concurrency_limit_to_default("model")
    instance.event_log_storage.claim_concurrency_slot("model", run.run_id, "session_summaries")
    return run


def test_the_next_sweep_finishes_what_a_killed_run_left(tmp_path):
    """Deterministic: one run died between the model reply and the summary write (its lease still
    held), another after the write but before Dagster heard of it. The next sweep closes both runs,
    writes the staged summary from the stored reply, records the other, and calls no model."""
    home = tmp_path / "home"
    with ModelServer(lambda r: Behaviour.reply({**GOOD_SUMMARY, "summary": "the staged reply"})) as first:
        settings = load_settings(_env(home, first.url))
        store = _store(settings.db_path)
        turns = make_turns("staged", 2, minis=2) + make_turns("written", 2, minis=2)
        ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
        hosts = ModelHosts(settings)
        (home / "dagster").mkdir(parents=True)
        write_instance_config(home / "dagster", settings)  # the pool limit of 1, as the CLI writes it
        instance = DagsterInstance.from_config(str(home / "dagster"))
        runs = {}
        for key in ("staged", "written"):
            runs[key] = _killed_run(instance, settings, key)
            store.summaries.claim_summary_lease(key, runs[key].run_id, int(time.time() * 1000), ttl_s=3600)
            revision = store.sessions.session_by_partition(key)["input_revision"]
            result = summarize_session(
                store.sessions.load_turns([key]),
                hosts.client(store, (key, revision)),
                hosts.limits(),
                RunLedger(store, runs[key].run_id),
            )
            if key == "written":
                store.summaries.write_summary(result.summary, run_id=runs[key].run_id)
        assert instance.event_log_storage.get_concurrency_info("model").active_slot_count == 1
        instance.dispose()
    assert store.cache.staged_summary_keys() == ["staged"]

    with ModelServer() as second:
        env = _env(home, second.url)
        done = subprocess.run(CLI + ["sweep", "--json"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        swept = json.loads(done.stdout)
    assert second.chat_requests() == []
    assert sorted(swept["interrupted_runs_closed"]) == sorted(r.run_id for r in runs.values())
    assert swept["staged_replayed"] == ["staged"] and swept["summarized"] == 1
    summaries = {r["session_id"]: r for r in store.reports.summary_rows()}
    assert summaries["staged"]["summary"] == "the staged reply"
    assert summaries["written"]["run_id"] == runs["written"].run_id  # written once, never again
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        assert all(instance.get_run_by_id(r.run_id).status == DagsterRunStatus.FAILURE for r in runs.values())
        assert instance.get_materialized_partitions(AssetKey("session_summaries")) == {"staged", "written"}
        assert instance.event_log_storage.get_concurrency_info("model").active_slot_count == 0
    finally:
        instance.dispose()
    assert store.summaries.pending_summary_keys() == [] and store.cache.staged_summary_keys() == []


def test_with_reuse_off_the_staged_reply_goes_once_the_summary_is_written(tmp_path):
    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"})
    store = _store(settings.db_path)
    ingest_paths([write_bundle(tmp_path / "bundle", make_turns("s1", 2, minis=2))], store)
    with ModelServer() as server:
        resources = build_definitions(settings).resources
        fields = {name: getattr(resources["model"], name) for name in ChatModelResource.model_fields}
        model = ChatModelResource(**{**fields, "model_url": server.url, "response_cache": False})
        revision = store.sessions.session_by_partition("s1")["input_revision"]
        # The run that died after the reply: its reply is staged for s1 at this revision.
        summarize_session(
            store.sessions.load_turns(["s1"]),
            ModelHosts(model).client(store, ("s1", revision)),
            ModelHosts(model).limits(),
            RunLedger(store, "dead"),
        )
        instance = DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("sessions", ["s1"])
        result = materialize(
            [raw_sessions, turn_mini_summaries, session_summaries],
            partition_key="s1",
            resources={**resources, "model": model},
            instance=instance,
        )
    assert result.success and len(server.chat_requests()) == 1
    assert store.query("SELECT count(*) AS n FROM response_cache")["n"][0] == 0


# --- SIGKILL at random points --------------------------------------------------------------------

# CI's size (about 2 minutes); 120 and 60 make the longer stress run quoted in the README. A kill
# costs the backlog some 2.4 sessions (the ones its sweep finished first): with 45 the backlog ran
# dry before the 22nd kill, and the idle sweeps that followed ended before a kill could land.
SESSIONS = 80
KILLS = 22


class RecordingModel:
    """A model server whose every reply is unique ("reply N"), so a summary made from another call
    than the one staged would show; it notes when each reply goes out."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.numbers = itertools.count(1)
        self.reply_times: list[float] = []
        self.lock = threading.Lock()
        self.server = ModelServer(self.script)

    def script(self, received) -> Behaviour:
        with self.lock:
            number = next(self.numbers)
            delay = self.rng.uniform(0.05, 0.4)
            self.reply_times.append(time.monotonic() + delay)
        # A summary whose verdict is `ok`: a junk one would be tried again on the degraded route.
        summary = f"reply {number}: {FAITHFUL_SUMMARY['summary']}"
        return Behaviour(content=json.dumps({**FAITHFUL_SUMMARY, "summary": summary}), delay_s=delay)

    def replies_since(self, started: float) -> int:
        with self.lock:
            return sum(started <= t <= time.monotonic() for t in self.reply_times)


def _summaries(store: DigestStore) -> dict[str, dict]:
    return {row["session_id"]: row for row in store.reports.summary_rows()}


def _staged_unfinished(store: DigestStore) -> dict[str, str]:
    """Replies staged for sessions that have no summary of those turns yet: session → its summary text."""
    rows = store.query(
        """SELECT c.session_id, c.text FROM response_cache c
           LEFT JOIN session_summaries x ON x.session_id = c.session_id AND x.input_revision = c.input_revision
           WHERE c.session_id IS NOT NULL AND x.session_id IS NULL"""
    )
    return {sid: json.loads(text)["summary"] for sid, text in rows.values.tolist()}


def test_a_sweep_killed_at_random_points_loses_no_summary_and_duplicates_none(tmp_path):
    rng = random.Random(20261129)
    home = tmp_path / "home"
    model = RecordingModel(rng)
    # Distinct documents: sessions with the same prompt would share one cached reply.
    turns = [
        dataclasses.replace(t, document=f"{t.document} ({t.session_id})")
        for i in range(SESSIONS)
        for t in make_turns(f"s{i:03d}", 2, minis=2)
    ]
    settings = load_settings({"DIGEST_HOME": str(home)})
    store = _store(settings.db_path)
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)

    kills, trials, staged_at_kill, texts = 0, 0, {}, {}
    started_all = time.monotonic()
    with model.server as server:
        env = _env(home, server.url, DIGEST_SWEEP_MAX_SESSIONS="25", DIGEST_SUMMARY_TIMEOUT_S="10")
        previous: dict[str, dict] = {}
        while kills < KILLS:
            trials += 1
            assert trials < 3 * KILLS, "the sweeps kept finishing before the kill"
            sweep = subprocess.Popen(
                CLI + ["sweep"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
            started = time.monotonic()
            if trials % 3 == 0:  # anywhere: start-up, recovery, Dagster's writes, DuckDB's
                deadline = started + rng.uniform(0.3, 8.0)
                while time.monotonic() < deadline and sweep.poll() is None:
                    time.sleep(0.01)
            else:  # just after a reply: between the staging, the ledger, the summary write, the event
                wanted = rng.randint(1, 3)
                while model.replies_since(started) < wanted and sweep.poll() is None:
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.0, 0.25))
            if sweep.poll() is None:
                os.killpg(sweep.pid, signal.SIGKILL)
                kills += 1
            sweep.wait()

            now = _summaries(store)
            for sid, row in previous.items():  # no finished summary lost or changed
                assert now.get(sid) == row, f"summary of {sid} lost or changed after kill {kills}"
            for sid, row in now.items():
                texts.setdefault((sid, row["input_revision"]), set()).add(row["summary"])
            for sid, text in _staged_unfinished(store).items():
                staged_at_kill.setdefault(sid, text)
            previous = now

        for _ in range(4):  # restart until the backlog is done
            done = subprocess.run(CLI + ["sweep"], env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            if not store.summaries.pending_summary_keys():
                break
    final = _summaries(store)
    for sid, row in previous.items():
        assert final[sid] == row
    for sid, row in final.items():
        texts.setdefault((sid, row["input_revision"]), set()).add(row["summary"])
    requests = len(server.chat_requests())

    assert sorted(final) == [f"s{i:03d}" for i in range(SESSIONS)] and store.summaries.pending_summary_keys() == []
    assert store.query("SELECT count(*) - count(DISTINCT session_id) AS dup FROM session_summaries")["dup"][0] == 0
    assert all(len(seen) == 1 for seen in texts.values()), "two different summaries for one revision"
    # A staged reply is finished as it was, never asked again: each kill costs at most the one
    # reply in flight that was not staged yet.
    for sid, text in staged_at_kill.items():
        assert final[sid]["summary"] == text
    assert requests <= SESSIONS + kills
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        assert instance.get_runs_count(filters=_in_flight()) == 0  # every killed run was closed
        assert instance.get_materialized_partitions(AssetKey("session_summaries")) == set(final)
    finally:
        instance.dispose()
    outcomes = ledger_after_kills(store, server.chat_requests(), kills)
    print(
        f"\n{kills} kills in {trials} trials, {len(staged_at_kill)} staged replies finished after a kill, "
        f"{requests} model calls for {SESSIONS} sessions, {time.monotonic() - started_all:.0f}s; "
        f"the ledger's calls: {dict(sorted(outcomes.items()))}"
    )


def ledger_after_kills(store: DigestStore, requests, kills: int) -> Counter:
    """Issue 31, defect 6: every call the server received has its `attempts` row (written before the
    call), and none is left in flight once the killed runs are closed. A kill between the row and the
    request leaves a row the server never saw: at most one per kill. The outcomes of the calls."""
    rows = store.query("SELECT session_id, outcome, duration_s, deadline_s FROM attempts WHERE NOT cached")
    asked = Counter(re.search(r"\((s\d{3})\)", r.prompt).group(1) for r in requests)
    ledgered = Counter(rows["session_id"])
    missing = {sid: (n, ledgered[sid]) for sid, n in asked.items() if ledgered[sid] < n}
    assert not missing, f"calls the server received without an attempts row (received, rows): {missing}"
    assert len(rows) - len(requests) <= kills
    outcomes = Counter(rows["outcome"])
    assert "in-flight" not in outcomes
    interrupted = rows[rows["outcome"] == "interrupted"]
    assert ((interrupted["duration_s"] > 0) & (interrupted["duration_s"] <= interrupted["deadline_s"])).all()
    return outcomes


def _in_flight():
    from dagster import RunsFilter

    from pipelines.sensors import IN_FLIGHT

    return RunsFilter(statuses=IN_FLIGHT)


def test_a_replayed_reply_is_ledgered_as_cached_and_priced_at_no_model_time(tmp_path):
    store = _store(tmp_path / "d.duckdb")
    turns = make_turns("s", 2)
    with ModelServer(lambda received: Behaviour.hang(0.3)) as server:
        client = CachedChatClient(
            OpenAIChatClient(server.url, "m", schema_style="json_object"), store.cache, {"provider": "openai"}
        )
        limits = dataclasses.replace(load_settings({}).limits(), raw_cap_tokens=None)
        for _ in range(2):
            assert summarize_session(turns, client, limits, RunLedger(store, "r")).summary is not None
    assert len(server.chat_requests()) == 1
    rows = store.query("SELECT cached, duration_s FROM attempts ORDER BY attempt_id").to_dict("records")
    assert [r["cached"] for r in rows] == [False, True] and rows[1]["duration_s"] == 0
    # Throughput comes from the real call alone.
    assert store.speed.seconds_per_token("m") == pytest.approx(
        rows[0]["duration_s"]
        / store.query("SELECT tokens_estimate FROM attempts WHERE NOT cached")["tokens_estimate"][0]
    )
