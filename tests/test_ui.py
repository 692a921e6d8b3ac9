"""The Dagster UI as a user sees it: the real webserver on loopback, driven in headless Chromium.

Chromium is Debian's package (`apt-get install chromium`), driven by Playwright through its
executable path: no browser is downloaded. Without it the test is skipped, except under CI (the
env var CI set), where it fails.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dagster import DagsterInstance

from assets.backlog import backlog_events
from assets.work.backlog import measure
from digest.scheduling import now_ms
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.instance import write_instance_config
from pipelines.jobs import SWEEP_RUN_ASSETS, default_run_config
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import ModelServer

CHROMIUM = Path("/usr/bin/chromium")
# As root on this machine Chromium needs --no-sandbox; the network flags keep it from dialling out.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO_ROOT / "docs" / "images" / "partitions.png"  # with DIGEST_SCREENSHOT=1
# Where the test's screenshots are copied with DIGEST_SCREENSHOT=1 (else only under the test's tmp_path).
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"
UI_TIMEOUT_MS = 60_000  # the webserver loads the code location in a subprocess; slow on a busy host

# Every asset node's box and every lineage edge's path, as the graph draws them (SVG).
GRAPH_GEOMETRY_JS = """() => ({
  nodes: [...document.querySelectorAll('foreignObject')].map(f => ({
    name: (f.querySelector('[data-tooltip]') || {getAttribute: () => null}).getAttribute('data-tooltip'),
    x: +f.getAttribute('x'), y: +f.getAttribute('y'), w: +f.getAttribute('width'), h: +f.getAttribute('height'),
  })),
  edges: [...document.querySelectorAll('path[stroke="var(--color-lineage-edge)"]')].map(p => p.getAttribute('d')),
})"""
# Whether every group and node lies inside the graph's visible frame (its first ancestor that clips).
GRAPH_FITS_JS = """() => {
  const boxes = [...document.querySelectorAll('foreignObject')];
  let frame = boxes[0].ownerSVGElement;
  while (getComputedStyle(frame).overflow !== 'hidden') frame = frame.parentElement;
  const box = frame.getBoundingClientRect();
  return boxes.every(f => { const r = f.getBoundingClientRect(); return r.left >= box.left && r.right <= box.right; });
}"""


def _require_browser() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[test]')")
    if missing:
        reason = "the UI test needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run it")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fill_store(tmp_path: Path, env: dict) -> None:
    """Run the real jobs, as the sensor and the CLI do: ingest; a raw summary ("small") as the
    summary sensor's run makes it, without the mini-summary step; its summary restored from a bundle
    by `session-digest restore`; a degraded one ("big") asked for by hand; the report. "fresh" is
    ingested and never summarized."""
    settings = load_settings(env)
    turns = make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=40) + make_turns("fresh", 2)
    folder = write_bundle(tmp_path / "bundle", turns)
    write_instance_config(Path(env["DAGSTER_HOME"]), settings)  # as `session-digest ui` writes it
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    try:
        with ModelServer() as server:
            definitions = build_definitions(dataclasses.replace(settings, model_url=server.url))
            config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
            assert (
                definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
            )
            store = DigestStore(settings.db_path)
            register_partitions(instance, store)
            job = definitions.resolve_job_def("summarize_sessions")
            sweep_run = job.get_subset(asset_selection=set(SWEEP_RUN_ASSETS))
            assert sweep_run.execute_in_process(
                default_run_config(sweep_run, "small"), instance=instance, partition_key="small"
            ).success
            _record_backlog(instance, store, settings)
            bundle = store.archive.write_archive(tmp_path / "archives", ["small"])["path"]
            store.query(
                "UPDATE session_summaries SET title = 'moved on', created_at = now() WHERE session_id = 'small'"
            )
            restored = subprocess.run(
                [sys.executable, "-m", "app.cli", "restore", bundle, "--mode", "replace", "--json"],
                env={**env, "DIGEST_MODEL_URL": server.url}, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert restored.returncode == 0 and '"summaries_restored": 1' in restored.stdout, restored.stderr[-3000:]
            # "big" last: its materialization is the latest.
            assert job.execute_in_process(instance=instance, partition_key="big").success
            assert definitions.resolve_job_def("report_friction").execute_in_process(instance=instance).success
            _record_backlog(instance, store, settings)
    finally:
        instance.dispose()


def _record_backlog(instance, store, settings) -> None:
    """The `backlog` asset's materialization and check, as a sensor tick or a CLI sweep records them."""
    measured = measure(store, settings.fleet, settings.circuit, settings.sweep, now_ms())
    for event in backlog_events(measured, settings.sweep):
        instance.report_runless_asset_event(event)


def _expected_lineage(env: dict) -> tuple[set[str], set[tuple[str, str]]]:
    graph = build_definitions(load_settings(env)).resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    names = {key.to_user_string() for key in keys}
    edges = {(parent.to_user_string(), key.to_user_string()) for key in keys for parent in graph.get(key).parent_keys}
    return names, edges


def _drawn_lineage(geometry: dict, names: set[str]) -> tuple[set[str], set[tuple[str, str]]]:
    """The graph's edges as (upstream, downstream) names: an edge leaves its source's right side and
    its arrow stops just short of the target's left side."""
    nodes = [n for n in geometry["nodes"] if n["name"] in names]

    def node_at(x: float, y: float, side: str) -> str | None:
        for n in nodes:
            edge_x = n["x"] + n["w"] if side == "right" else n["x"]
            if abs(edge_x - x) <= 10 and n["y"] <= y <= n["y"] + n["h"]:
                return n["name"]
        return None

    edges = set()
    for path in geometry["edges"]:
        numbers = [float(v) for v in path.replace("M", " ").replace("C", " ").replace(",", " ").split()]
        edges.add((node_at(numbers[0], numbers[1], "right"), node_at(numbers[-2], numbers[-1], "left")))
    return {n["name"] for n in nodes}, edges


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """`dagster-webserver` on a free loopback port over a DAGSTER_HOME the real jobs filled, as
    `session-digest ui` serves it (its dagster.yaml, its run queue); one for the module's tests."""
    _require_browser()
    tmp_path = tmp_path_factory.mktemp("webserver")
    env = {
        **project_free_environ(),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "DIGEST_HOME": str(tmp_path / "home"),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_RAW_CAP_TOKENS": "2000",
    }
    Path(env["DAGSTER_HOME"]).mkdir()
    _fill_store(tmp_path, env)
    port = _free_port()
    command = [str(Path(sys.executable).parent / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port),
               "-m", "pipelines.definitions"]  # fmt: skip
    log = (tmp_path / "webserver.log").open("w")
    # Its own process group: the webserver starts a code server of its own, stopped with it.
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the webserver did not come up: {(tmp_path / 'webserver.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url, env
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _open_browser(playwright, tmp_path: Path):
    """Headless Chromium on a fresh profile, and a page. A fresh instance greets the first visitor
    with a newsletter dialog over every page: the browser has dismissed it already (its flag in
    localStorage, as the dialog's Skip sets it)."""
    browser = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=str(CHROMIUM),
        args=CHROMIUM_FLAGS,
        headless=True,
        viewport={"width": 1920, "height": 1080},
    )
    browser.add_init_script("window.localStorage.setItem('communityNux', 'true')")
    page = browser.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    from playwright.sync_api import expect

    # `expect` keeps its own 5 s default: the backlog's plots took longer to load under CI's load.
    expect.set_options(timeout=UI_TIMEOUT_MS)
    return browser, page


def _screenshot(page, tmp_path: Path, name: str, full_page: bool = False) -> Path:
    """Under the test's tmp_path, printed (pytest -s shows it); with DIGEST_SCREENSHOT=1 copied to
    docs/screenshots/ as well."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    print(f"screenshot: {path}")
    if os.environ.get("DIGEST_SCREENSHOT") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / path.name)
    return path


def test_the_asset_graph_lineage_and_a_summary_materialization_in_a_real_browser(webserver, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    url, env = webserver
    names, edges = _expected_lineage(env)
    assert {"raw_turns", "raw_sessions", "session_summaries", "friction_report"} <= names
    with sync_playwright() as playwright:
        browser, page = _open_browser(playwright, tmp_path)
        try:
            # The asset graph, every generation up and down from the summaries.
            page.goto(f"{url}/assets/session_summaries?view=lineage")
            page.get_by_role("button", name="All", exact=True).click()
            for name in names:
                expect(page.locator(f"foreignObject [data-tooltip='{name}']").first).to_be_visible()
            page.wait_for_function(
                "n => document.querySelectorAll('path[stroke=\"var(--color-lineage-edge)\"]').length >= n",
                arg=len(edges),
            )
            drawn_names, drawn_edges = _drawn_lineage(page.evaluate(GRAPH_GEOMETRY_JS), names)
            assert drawn_names == names
            assert drawn_edges == edges
            for _ in range(6):  # zoom out until the whole lineage is in the picture
                if page.evaluate(GRAPH_FITS_JS):
                    break
                page.locator("button:has([aria-label='zoom_out'])").click()
                page.wait_for_timeout(400)  # the zoom animates
            _screenshot(page, tmp_path, "asset-lineage")

            # The latest summary materialization ("big", degraded) with its provenance in the metadata.
            page.goto(f"{url}/assets/session_summaries")
            source_tier = page.locator("tr", has=page.get_by_text("source_tier", exact=True))
            expect(source_tier).to_contain_text("miniSummary")
            expect(page.locator("tr", has=page.get_by_text("route_reason", exact=True))).to_contain_text("over-raw-cap")
            _screenshot(page, tmp_path, "session-summaries", full_page=True)

            # The README's picture, on request only, so a test run leaves the tree clean.
            if os.environ.get("DIGEST_SCREENSHOT") == "1":
                page.goto(f"{url}/assets/session_summaries?view=partitions")
                page.get_by_text("big", exact=True).first.click()  # its summary's metadata beside the list
                expect(page.locator("tr", has=page.get_by_text("source_tier", exact=True))).to_contain_text(
                    "miniSummary"
                )
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT))
        finally:
            browser.close()
    assert (tmp_path / "asset-lineage.png").stat().st_size > 10_000


def test_the_launch_dialog_a_restored_summary_the_backlog_and_a_placed_run_in_a_real_browser(webserver, tmp_path):
    """Issue 30's UI points as a user meets them: a raw session's summary warns of no missing
    upstream data in the launch dialog (only the never-summarized session does), and its mini-summary
    partition says why it needs none; a run launched from that dialog is queued on a model host with
    the sensor's tags; the restored summary's materialization shows the summary as its run did; the
    backlog asset plots its figures."""
    from playwright.sync_api import expect, sync_playwright

    url, env = webserver
    with sync_playwright() as playwright:
        browser, page = _open_browser(playwright, tmp_path)
        try:
            # The summaries' launch dialog, all partitions: only "fresh" (never summarized, its raw
            # turns never described) misses upstream data; "small", summarized raw by a sweep's run
            # without the mini-summary step, does not.
            page.goto(f"{url}/assets/session_summaries")
            page.locator("button", has_text="Materialize").first.click()
            page.get_by_role("button", name="All", exact=True).click()
            missing = page.get_by_text("cannot be materialized because upstream materializations are not available")
            expect(missing).to_contain_text("fresh cannot be materialized")
            expect(missing).not_to_contain_text("small")
            _screenshot(page, tmp_path, "launch-dialog-all-partitions")
            # "small" alone (the dialog's own link drops "fresh", then "big"'s chip is closed): no
            # warning, and the run goes to the queue placed on its host.
            page.get_by_text("remove these partitions").click()
            expect(page.get_by_text("Upstream data missing")).to_have_count(0)
            page.locator("[data-tooltip='big'] [aria-label='close']").click()
            expect(page.get_by_text("1 partition", exact=True)).to_be_visible()
            _screenshot(page, tmp_path, "launch-dialog-raw-session")
            page.get_by_role("button", name="Launch 1 run", exact=True).click()
            run = _queued_run(env["DAGSTER_HOME"], "small")
            assert run.tags["digest/model_host"] == "default" and run.tags["digest/route"] == "raw"
            page.goto(f"{url}/runs/{run.run_id}")
            page.get_by_text("View tags and config").click()
            expect(page.get_by_text("digest/model_host").first).to_be_visible()
            _screenshot(page, tmp_path, "ui-run-placed-on-host")

            # "small"'s mini-summary partition: materialized by its summary's run, saying why none is needed.
            page.goto(f"{url}/assets/turn_mini_summaries?view=partitions")
            page.get_by_text("small", exact=True).first.click()
            not_needed = page.locator("tr", has=page.get_by_text("not_needed", exact=True))
            expect(not_needed).to_contain_text("no mini summary needed: the summary read the raw turns")
            _screenshot(page, tmp_path, "mini-summaries-not-needed", full_page=True)

            # "small"'s summary as the restore recorded it: the summary run's metadata and its bundle.
            page.goto(f"{url}/assets/session_summaries?view=partitions")
            page.get_by_text("small", exact=True).first.click()
            expect(page.locator("tr", has=page.get_by_text("recorded_by", exact=True))).to_contain_text("restored from")
            summary = page.locator("tr", has=page.get_by_text("summary", exact=True))
            expect(summary).to_contain_text("Fix token refresh")
            expect(page.locator("tr", has=page.get_by_text("cost_calls", exact=True))).to_contain_text("1")
            summary.scroll_into_view_if_needed()
            _screenshot(page, tmp_path, "restored-summary")

            # The backlog: its figures, and their plots across its two materializations.
            page.goto(f"{url}/assets/backlog")
            expect(page.locator("tr", has=page.get_by_text("pending", exact=True)).first).to_contain_text("1")
            page.get_by_role("button", name="Plots").click()
            expect(page.get_by_text("finished_last_hour").first).to_be_visible()
            _screenshot(page, tmp_path, "backlog-plots", full_page=True)
        finally:
            browser.close()


def _queued_run(dagster_home: str, partition: str, timeout_s: float = UI_TIMEOUT_MS / 1000):
    """The run the UI launched for `partition`, once it is in the queue (no daemon dequeues it here)."""
    from dagster import DagsterRunStatus, RunsFilter

    deadline = time.monotonic() + timeout_s
    with DagsterInstance.from_config(dagster_home) as instance:
        while True:
            runs = instance.get_runs(filters=RunsFilter(tags={"dagster/partition": partition}, job_name="__ASSET_JOB"))
            if runs and runs[0].status == DagsterRunStatus.QUEUED:
                return runs[0]
            assert time.monotonic() < deadline, f"no queued run for {partition!r}: {runs}"
            time.sleep(0.5)
