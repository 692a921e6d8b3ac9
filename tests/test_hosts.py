"""Several model hosts: the hosts file, its validation, and which host a session goes to."""

from __future__ import annotations

import time

import pytest

from digest.hosts import DEFAULT_HOST, HostsError, HostView, assign_batch, assign_host, load_hosts_file
from digest.scheduling import Candidate, SweepPolicy
from digest.settings import SettingsError, load_settings
from digest.settings_fleet import DEFAULT_MODEL_NAMES
from digest.synthesis import Route, SourceTier
from pipelines.selection import next_summary_batch
from resources.model_hosts import hosts_in_rotation

CPU_AND_GPU = """
[[hosts]]
name = "cpu"
provider = "ollama"
url = "http://10.0.0.5:11434/"
model = "qwen3:4b"
context_limit_tokens = 32768
raw_cap_tokens = 8192

[[hosts]]
name = "gpu"
provider = "openai"
url = "http://10.0.0.9:8080"
context_limit_tokens = 131072
raw_cap_tokens = "off"
concurrency = 4
bytes_per_token = 3.6
"""


def _hosts_file(tmp_path, text: str):
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def test_a_hosts_file_declares_each_host_with_its_own_bounds(tmp_path):
    cpu, gpu = load_hosts_file(_hosts_file(tmp_path, CPU_AND_GPU), DEFAULT_MODEL_NAMES)
    assert (cpu.name, cpu.provider, cpu.url, cpu.model) == ("cpu", "ollama", "http://10.0.0.5:11434", "qwen3:4b")
    assert (cpu.context_limit_tokens, cpu.safe_limit_tokens, cpu.raw_cap_tokens) == (32768, 24576, 8192)
    assert (cpu.concurrency, cpu.bytes_per_token) == (1, None)  # one call at once; the ratio measured
    assert (gpu.model, gpu.raw_cap_tokens, gpu.concurrency, gpu.bytes_per_token) == ("default", None, 4, 3.6)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('name = "a"\nprovider = "vllm"\ncontext_limit_tokens = 8192', "host 'a' ([[hosts]] #2): field provider"),
        ('name = "a"\nprovider = "openai"', "host 'a' ([[hosts]] #2): field context_limit_tokens: Field required"),
        ('name = "a"\nprovider = "openai"\ncontext_limit_tokens = 8192\nraw_cap_tokens = 0', "field raw_cap_tokens"),
        ('name = "a"\nprovider = "openai"\ncontext_limit_tokens = 8192\nconcurrency = 0', "field concurrency"),
        ('name = "a"\nprovider = "openai"\ncontext_limit_tokens = 8192\nurl = "10.0.0.9:8080"', "field url"),
        ('name = "a b"\nprovider = "openai"\ncontext_limit_tokens = 8192', "field name"),
        ('name = "a"\nprovider = "openai"\ncontext_limit_tokens = 8192\ncontext = 1', "field context: Extra inputs"),
        (
            'name = "a"\nprovider = "openai"\ncontext_limit_tokens = 8192\nsafe_limit_tokens = 9000',
            "safe_limit_tokens 9000 is above context_limit_tokens 8192",
        ),
        ('name = "cpu"\nprovider = "openai"\ncontext_limit_tokens = 8192', "another host is already named 'cpu'"),
    ],
)
def test_a_bad_host_is_refused_naming_the_file_the_host_and_the_field(tmp_path, table, says):
    path = _hosts_file(
        tmp_path, f'[[hosts]]\nname = "cpu"\nprovider = "ollama"\ncontext_limit_tokens = 8192\n\n[[hosts]]\n{table}\n'
    )
    with pytest.raises(HostsError) as refused:
        load_hosts_file(path, DEFAULT_MODEL_NAMES)
    assert str(path) in str(refused.value)
    assert says in str(refused.value)


BASE = 'name = "a"\nprovider = "openai"\n'


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        # Past what the store's INT32 columns (and any served model) hold: refused at load, not in a run.
        ("context_limit_tokens = 1180591620717411303424", "field context_limit_tokens"),  # 2**70
        ("context_limit_tokens = 2147483648", "field context_limit_tokens"),
        ("context_limit_tokens = 8192\nsafe_limit_tokens = 4294967296", "field safe_limit_tokens"),
        ("context_limit_tokens = 8192\nraw_cap_tokens = 2147483648", "field raw_cap_tokens"),
        ("context_limit_tokens = 8192\nconcurrency = 65", "field concurrency"),
        ("context_limit_tokens = 8192\nbytes_per_token = 1e300", "field bytes_per_token"),
        ("context_limit_tokens = 8192\nbytes_per_token = 1e-9", "field bytes_per_token"),
        # A boolean is not a number, whatever Python says.
        ("context_limit_tokens = 8192\nconcurrency = true", "field concurrency"),
        ("context_limit_tokens = true", "field context_limit_tokens"),
        ("context_limit_tokens = 8192\nsafe_limit_tokens = true", "field safe_limit_tokens"),
        ("context_limit_tokens = 8192\nraw_cap_tokens = true", "field raw_cap_tokens"),
        ("context_limit_tokens = 8192\nbytes_per_token = true", "field bytes_per_token"),
        ("context_limit_tokens = 8192.5", "field context_limit_tokens"),
    ],
)
def test_a_hosts_number_out_of_bounds_or_a_boolean_is_refused(tmp_path, fields, says):
    """Issue 22, defect 8: `context_limit_tokens = 2**70` passed and every summary run then died on an
    INT32 column; `concurrency = true` was taken as 1."""
    path = _hosts_file(tmp_path, f"[[hosts]]\n{BASE}{fields}\n")
    with pytest.raises(HostsError) as refused:
        load_hosts_file(path, DEFAULT_MODEL_NAMES)
    assert says in str(refused.value), str(refused.value)


def test_a_hosts_file_at_its_bounds_loads(tmp_path):
    from digest.hosts import MAX_CONCURRENCY, MAX_CONTEXT_TOKENS

    path = _hosts_file(
        tmp_path,
        f"[[hosts]]\n{BASE}context_limit_tokens = {MAX_CONTEXT_TOKENS}\nsafe_limit_tokens = {MAX_CONTEXT_TOKENS}\n"
        f"raw_cap_tokens = {MAX_CONTEXT_TOKENS}\nconcurrency = {MAX_CONCURRENCY}\nbytes_per_token = 4\n",
    )
    [host] = load_hosts_file(path, DEFAULT_MODEL_NAMES)
    assert host.context_limit_tokens == MAX_CONTEXT_TOKENS < 2**31 and host.bytes_per_token == 4.0
    assert type(host.bytes_per_token) is float and type(host.concurrency) is int


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[[hosts]\nname =", "is not valid TOML"),
        ("", "no [[hosts]] table"),
        ('[[host]]\nname = "a"', "unknown top-level key(s) host"),
    ],
)
def test_a_hosts_file_that_is_not_a_list_of_hosts_is_refused(tmp_path, text, says):
    with pytest.raises(HostsError, match=says.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        load_hosts_file(_hosts_file(tmp_path, text), DEFAULT_MODEL_NAMES)


def test_the_settings_load_the_hosts_file_and_fail_at_load_on_a_bad_one(tmp_path):
    home = {"DIGEST_HOME": str(tmp_path)}
    fleet = load_settings({**home, "DIGEST_MODEL_HOSTS": str(_hosts_file(tmp_path, CPU_AND_GPU))}).fleet
    assert fleet.names == ["cpu", "gpu"] and fleet.total_concurrency == 5
    assert fleet.limits("gpu").raw_cap_tokens is None and fleet.limits("gpu").bytes_per_token == 3.6
    # The graph output cap defaults to an eighth of the smallest declared context (the CPU host: 32768).
    assert load_settings({**home, "DIGEST_MODEL_HOSTS": str(tmp_path / "hosts.toml")}).graph.output_limit_tokens == 4096
    with pytest.raises(SettingsError, match="cannot read it"):
        load_settings({**home, "DIGEST_MODEL_HOSTS": str(tmp_path / "missing.toml")})


def test_without_a_hosts_file_the_single_host_settings_are_the_one_host(tmp_path):
    settings = load_settings(
        {"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_PROVIDER": "ollama", "DIGEST_RAW_CAP_TOKENS": "4000"}
    )
    (host,) = settings.fleet.hosts
    assert (host.name, host.provider, host.model, host.raw_cap_tokens, host.concurrency) == (
        DEFAULT_HOST, "ollama", "llama3.2", 4000, 1
    )  # fmt: skip
    assert settings.limits() == settings.fleet.limits(DEFAULT_HOST)


def _candidate(key: str, raw_bytes: int, turns: int = 10) -> Candidate:
    return Candidate(key, key, None, turns, raw_bytes, compact_bytes=turns * 200, mini_summary_count=0)


def _views(tmp_path, queued: dict[str, float] | None = None, speed: dict[str, float] | None = None):
    fleet = load_settings(
        {"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_HOSTS": str(_hosts_file(tmp_path, CPU_AND_GPU))}
    ).fleet
    return [
        HostView(h, fleet.limits(h.name), (speed or {}).get(h.name, 1 / 50), (queued or {}).get(h.name, 0.0))
        for h in fleet.hosts
    ]


def test_a_session_over_one_hosts_cap_goes_raw_to_the_host_that_admits_it(tmp_path):
    # ~40,000 tokens: over the CPU host's 8192 cap, within the GPU host's safe band (98,304).
    assignment = assign_host(_candidate("big", 120_000), _views(tmp_path))
    assert (assignment.host, assignment.route, assignment.tier) == ("gpu", Route.WITHIN_CAP, SourceTier.RAW)
    assert assignment.reason == "raw; 1 of 2 host(s) admit it raw (cpu over-raw-cap)"


def test_only_a_session_no_host_can_take_raw_is_degraded(tmp_path):
    # ~140,000 tokens at the GPU host's pinned 3.6 bytes a token: over its safe band too.
    assignment = assign_host(_candidate("huge", 500_000, turns=200), _views(tmp_path))
    assert assignment.tier == SourceTier.TRUNCATED_RAW and assignment.route != Route.WITHIN_CAP
    assert assignment.reason.startswith("degraded; no host admits it raw (widest raw cap off)")


def test_a_session_both_hosts_admit_goes_to_the_one_that_finishes_it_first(tmp_path):
    small = _candidate("small", 6_000)
    # Idle, the GPU host (20x faster) finishes it first; with 400 s queued on its 4 slots, the idle CPU host does.
    fast_gpu = {"cpu": 1 / 50, "gpu": 1 / 1000}
    assert assign_host(small, _views(tmp_path, speed=fast_gpu)).host == "gpu"
    assert assign_host(small, _views(tmp_path, queued={"gpu": 1600.0}, speed=fast_gpu)).host == "cpu"
    assert assign_host(small, []) is None  # no host in rotation


def test_a_batch_spreads_over_hosts_by_the_time_queued_on_each(tmp_path):
    same_speed = {"cpu": 1 / 50, "gpu": 1 / 50}
    batch = assign_batch([_candidate(f"s{i}", 6_000) for i in range(10)], _views(tmp_path, speed=same_speed))
    # The GPU host has four call slots to the CPU host's one: it takes four sessions for each of the CPU's.
    assert [a.host for a in batch].count("gpu") == 8
    assert [a.host for a in batch].count("cpu") == 2


def _store_of(tmp_path, new_store, sizes: list[int]):
    """Settings over CPU_AND_GPU, and a store of one single-turn session a size, an hour old and
    a minute apart, `s0` the newest, held for the test."""
    settings = load_settings(
        {"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_HOSTS": str(_hosts_file(tmp_path, CPU_AND_GPU))}
    )
    store = new_store(settings.db_path)
    now = int(time.time() * 1000)
    rows = [
        {
            "id": f"s{i}-t", "session_id": f"s{i}", "ts_ms": now - 3_600_000 - i * 60_000, "type": "agent-interaction",
            "document": "User Prompt: x\nAgent Response: " + "y" * size,
            "document_rebuilt": False, "source_file": "f.jsonl", "source_line": i + 1,
        }
        for i, size in enumerate(sizes)
    ]  # fmt: skip
    store.ingest.write_turns(rows)
    store.ingest.refresh_sessions([r["session_id"] for r in rows])
    return settings, store, now


def test_the_sweep_selection_places_each_session_and_scales_its_budget_with_the_hosts(tmp_path, new_store):
    settings, store, now = _store_of(tmp_path, new_store, [60_000 if i == 3 else 500 for i in range(12)])
    policy = SweepPolicy(max_sessions=3, model_seconds=10_000)
    selection = next_summary_batch(store, settings.fleet, policy, now)
    assert len(selection.batch) == 6  # 3 sessions a host
    big = next(a for a in selection.batch if a.candidate.session_id == "s3")
    assert (big.host, big.tier) == ("gpu", SourceTier.RAW)
    # With the GPU host out of rotation, the big session waits for it; the CPU host takes three others.
    alone = next_summary_batch(store, settings.fleet, policy, now, available=["cpu"])
    assert len(alone.batch) == 3 and alone.hosts_unavailable == ["gpu"] and alone.waiting_for_host == 1
    assert {a.host for a in alone.batch} == {"cpu"}
    none = next_summary_batch(store, settings.fleet, policy, now, available=[])
    assert none.batch == [] and "no model host available: cpu, gpu out of rotation" in none.skip_reason


def test_a_host_out_of_rotation_gets_no_session_and_one_only_it_takes_raw_waits_for_it(tmp_path, new_store):
    settings, store, now = _store_of(tmp_path, new_store, [60_000, 501, 502, 503])
    policy = SweepPolicy(max_sessions=5, model_seconds=10_000)
    circuit = settings.circuit
    for _ in range(circuit.failure_threshold):
        store.hosts.record_host_outcome("gpu", True, "connection refused", now, circuit)
    available, probing = hosts_in_rotation(store, settings.fleet, circuit, now)
    assert (available, probing) == (["cpu"], [])
    selection = next_summary_batch(store, settings.fleet, policy, now, available=available, probing=probing)
    # s0 only the GPU host takes raw: it waits for it instead of going degraded to the CPU host.
    assert sorted(a.candidate.session_id for a in selection.batch) == ["s1", "s2", "s3"]
    assert {a.host for a in selection.batch} == {"cpu"} and selection.waiting_for_host == 1
    # Past its backoff the GPU host is half-open: one run, its probe, which s0 is.
    later = now + int(circuit.retry_base_s * 1000) + 1
    available, probing = hosts_in_rotation(store, settings.fleet, circuit, later)
    assert (available, probing) == (["cpu", "gpu"], ["gpu"])
    # A look (`plan`) takes no probe; a sweep that places a session there takes it.
    look = next_summary_batch(store, settings.fleet, policy, later, available=available, probing=probing)
    assert [a.candidate.session_id for a in look.batch if a.host == "gpu"] == ["s0"]
    assert hosts_in_rotation(store, settings.fleet, circuit, later) == (["cpu", "gpu"], ["gpu"])
    sweep = next_summary_batch(
        store, settings.fleet, policy, later, available=available, probing=probing, circuit=circuit
    )
    assert [a.candidate.session_id for a in sweep.batch if a.host == "gpu"] == ["s0"]
    # The probe is out: the next tick does not send the GPU host a second run.
    assert hosts_in_rotation(store, settings.fleet, circuit, later + 1) == (["cpu"], [])
    again = next_summary_batch(
        store, settings.fleet, policy, later, available=available, probing=probing, circuit=circuit
    )
    assert "gpu" not in {a.host for a in again.batch}  # a stale selection loses the probe it no longer holds
