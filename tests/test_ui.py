"""The Dagster UI as a user sees it: the real webserver on loopback, driven in headless Chromium.

Chromium is Debian's package (`apt-get install chromium`), driven by Playwright through its
executable path: no browser is downloaded. Without it the test is skipped, except under CI (the
env var CI set), where it fails.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dagster import DagsterInstance

from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import ModelServer

CHROMIUM = Path("/usr/bin/chromium")
# As root on this machine Chromium needs --no-sandbox; the network flags keep it from dialling out.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO_ROOT / "docs" / "images" / "partitions.png"  # with DIGEST_SCREENSHOT=1
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
    """Run the real jobs, as the CLI does: ingest, two summaries (one raw, one degraded), the report."""
    settings = load_settings(env)
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=40))
    instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
    try:
        with ModelServer() as server:
            definitions = build_definitions(dataclasses.replace(settings, model_url=server.url))
            config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
            assert (
                definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
            )
            register_partitions(instance, DigestStore(settings.db_path))
            for key in ("small", "big"):  # "big" last: its materialization is the latest
                job = definitions.resolve_job_def("summarize_sessions")
                assert job.execute_in_process(instance=instance, partition_key=key).success
            assert definitions.resolve_job_def("report_friction").execute_in_process(instance=instance).success
    finally:
        instance.dispose()


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


@pytest.fixture
def webserver(tmp_path):
    """`dagster-webserver` on a free loopback port over a DAGSTER_HOME the real jobs filled."""
    _require_browser()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))},
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


def test_the_asset_graph_lineage_and_a_summary_materialization_in_a_real_browser(webserver, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    url, env = webserver
    names, edges = _expected_lineage(env)
    assert {"raw_turns", "raw_sessions", "session_summaries", "friction_report"} <= names
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh profile
            executable_path=str(CHROMIUM),
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": 1920, "height": 1080},
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(UI_TIMEOUT_MS)
            # A fresh instance greets the first visitor with a newsletter dialog; dismiss it whenever it shows.
            page.add_locator_handler(
                page.get_by_text("Join the Dagster community"),
                lambda _: page.get_by_role("button", name="Skip").click(),
            )

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
            page.screenshot(path=str(tmp_path / "asset-lineage.png"))

            # The latest summary materialization ("big", degraded) with its provenance in the metadata.
            page.goto(f"{url}/assets/session_summaries")
            source_tier = page.locator("tr", has=page.get_by_text("source_tier", exact=True))
            expect(source_tier).to_contain_text("miniSummary")
            expect(page.locator("tr", has=page.get_by_text("route_reason", exact=True))).to_contain_text("over-raw-cap")
            page.screenshot(path=str(tmp_path / "session-summaries.png"), full_page=True)

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
