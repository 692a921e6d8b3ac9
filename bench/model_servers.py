"""The embedded model's two servers side by side: llama-cpp-python's (compiled on install, Python's
uvicorn over the Llama API; the project's until issue 42) and llama.cpp's own C++ server from
xllamacpp's prebuilt wheel (what `resources.embedded_server` starts now). Same GGUF (SmolLM2-135M
Q4_1), same threads and context, all servers up at once and their calls alternated, first as the
machine is, then beside a load generator (busy-loop processes, bounded in time). Both runtimes are
OpenMP builds: each arm's threads wait passively at llama.cpp's barriers (OMP_WAIT_POLICY=PASSIVE,
as the project starts its server now); `--spin` adds arms that spin (the default, ACTIVE).

Per arm: time to first token and prompt tokens/s (a 1,215-token prompt, streamed, a fresh prefix each
call so no prompt cache helps), generated tokens/s (end-of-text banned so every call generates all
its tokens), the server's RSS (peak, VmHWM), and what a client that goes away mid-call costs: a long
streamed generation is dropped after 1 s, the server's CPU time is sampled for the next 3 s (a server
that stops computing spends ~0 there), and a short call then measures how long it waits.

Run: .venv/bin/python bench/model_servers.py --old-python /tmp/lcp/bin/python [--calls 3] [--load 2] [--spin]
     (--old-python: a Python with llama-cpp-python[server]==0.3.36 installed, the old runtime, e.g.
      python3.11 -m venv /tmp/lcp && CMAKE_ARGS=... /tmp/lcp/bin/pip install 'llama-cpp-python[server]==0.3.36';
      --smoke: one call, the new server alone, no load round)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources.embedded_server import MODEL_ALIAS, _die_with_parent, _free_port, gguf_path  # noqa: E402

N_CTX = 8192
# SmolLM2's <|endoftext|> (0) and <|im_end|> (2), banned so a generation runs all its tokens.
NO_END = {"0": -100, "2": -100}
PARAGRAPH = (
    "The grid's row selection breaks after sorting: selected rows jump to other records. Selection is "
    "stored by row index instead of record id, and sorting reorders the rows under it. "
)


def _busy(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        x += 1


class Server:
    def __init__(self, name: str, command: list[str], env: dict[str, str], log_dir: Path):
        self.name = name
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (log_dir / f"{name}.log").open("wb")
        command = [part.replace("{port}", str(self.port)) for part in command]
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **env}, preexec_fn=_die_with_parent
        )  # fmt: skip
        started = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited; log {self.log.name}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() - started > 180:
                raise RuntimeError(f"{name} not ready; log {self.log.name}")
            time.sleep(0.2)
        self.ready_s = time.monotonic() - started

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> tuple[float, float]:
        status = dict(
            line.split(":", 1)
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
            if ":" in line
        )
        return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


def stream_call(url: str, prompt: str, max_tokens: int, give_up_s: float | None = None) -> dict:
    body = {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "logit_bias": NO_END,
    }
    started = time.monotonic()
    first = last = None
    pieces = 0
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if give_up_s is not None and time.monotonic() - started >= give_up_s:
                break  # leaving the block closes the connection mid-generation
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                now = time.monotonic()
                first = first or now
                last = now
                pieces += 1
    return {"ttft_s": (first or time.monotonic()) - started, "pieces": pieces, "gen_s": (last or 0) - (first or 0)}


def prompt_tokens(url: str, prompt: str) -> int:
    """The prompt's tokens with the chat template, as the server counts them (one unstreamed call)."""
    body = {"model": MODEL_ALIAS, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600).json()["usage"]["prompt_tokens"]


def measure(servers: list[Server], calls: int, prompt_paragraphs: int, out_tokens: int) -> dict:
    rows: dict[str, dict[str, list[float]]] = {s.name: {"ttft": [], "pp": [], "tg": []} for s in servers}
    for i in range(calls):
        for server in servers:  # alternated: both see the same moments of the machine's load
            prompt = f"Call {i} of {server.name} at {time.time():.6f}. " + PARAGRAPH * prompt_paragraphs
            result = stream_call(server.url, prompt, out_tokens)
            n_prompt = prompt_tokens(server.url, prompt)  # after: its prompt cache does not help the call timed
            rows[server.name]["ttft"].append(result["ttft_s"])
            rows[server.name]["pp"].append(n_prompt / result["ttft_s"])
            if result["pieces"] > 1:
                rows[server.name]["tg"].append((result["pieces"] - 1) / result["gen_s"])
            print(f"  call {i} {server.name}: {n_prompt} prompt tokens, first token {result['ttft_s']:.2f} s, "
                  f"{result['pieces']} pieces in {result['gen_s']:.2f} s (loadavg {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    rows["prompt_tokens"] = n_prompt
    return rows


def cut_call(server: Server, long_tokens: int) -> dict:
    """A long streamed generation dropped after 1 s: the server's CPU over the next 3 s, and a short
    call's wait after it."""
    stream_call(server.url, "Write a very long story about a lighthouse keeper.", long_tokens, give_up_s=1.0)
    cpu0 = server.cpu_s()
    time.sleep(3.0)
    cpu_after = server.cpu_s() - cpu0
    started = time.monotonic()
    stream_call(server.url, "Say hi.", 8)
    return {"cpu_3s_after": cpu_after, "short_call_s": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-python", help="a Python with llama-cpp-python[server] (the old runtime)")
    parser.add_argument("--threads", type=int, nargs="+", default=[2], help="arms per thread count")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes in the loaded round (0: none)")
    parser.add_argument("--paragraphs", type=int, default=32, help="prompt size (32: about 1,200 tokens)")
    parser.add_argument("--out-tokens", type=int, default=64)
    parser.add_argument("--long-tokens", type=int, default=2000)
    parser.add_argument("--spin", action="store_true", help="also arms with spinning threads (OMP_WAIT_POLICY=ACTIVE)")
    parser.add_argument("--smoke", action="store_true", help="one call each, quiet only, short prompt")
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.load, args.paragraphs, args.out_tokens, args.long_tokens = 1, 0, 4, 8, 200
        args.threads = args.threads[:1]

    model = str(gguf_path())
    common = ["--host", "127.0.0.1", "--port", "{port}", "--n_ctx", str(N_CTX)]
    # OMP_WAIT_POLICY: llama.cpp's threads spin at their barriers by default (ACTIVE); the project
    # starts its server with PASSIVE (resources.embedded_server). The old server ran with the default.
    arms = {}
    for threads in args.threads:
        new = [sys.executable, "-m", "resources.llama_server", "--model", model, "--alias", MODEL_ALIAS, *common,
               "--threads", str(threads)]  # fmt: skip
        arms[f"xllamacpp t{threads} passive"] = (new, {"OMP_WAIT_POLICY": "PASSIVE"})
        if threads > 1 and args.spin:
            arms[f"xllamacpp t{threads} spin"] = (new, {"OMP_WAIT_POLICY": "ACTIVE"})
        if args.old_python:
            old = [args.old_python, "-m", "llama_cpp.server", "--model", model, "--model_alias", MODEL_ALIAS, *common,
                   "--n_threads", str(threads)]  # fmt: skip
            if threads > 1 and args.spin:
                arms[f"llama-cpp-python t{threads} spin"] = (old, {"OMP_WAIT_POLICY": "ACTIVE"})
            arms[f"llama-cpp-python t{threads} passive"] = (old, {"OMP_WAIT_POLICY": "PASSIVE"})
    log_dir = Path(tempfile.mkdtemp(prefix="model-servers-"))
    servers = [Server(name, command, env, log_dir) for name, (command, env) in arms.items()]
    try:
        for server in servers:
            stream_call(server.url, "Say hi.", 4)  # warm up
        rounds = [("quiet", 0)] + ([(f"load {args.load}", args.load)] if args.load else [])
        results = {}
        for label, load in rounds:
            busy = [
                multiprocessing.Process(target=_busy, args=(time.monotonic() + 900,), daemon=True) for _ in range(load)
            ]
            for p in busy:
                p.start()
            try:
                loadavg_before = os.getloadavg()[0]
                rows = measure(servers, args.calls, args.paragraphs, args.out_tokens)
                cuts = {}
                for s in servers:
                    cuts[s.name] = cut_call(s, args.long_tokens)
                    print(f"  cut {s.name}: {cuts[s.name]}", flush=True)
                results[label] = (rows, cuts, loadavg_before, os.getloadavg()[0])
            finally:
                for p in busy:
                    p.terminate()
                    p.join()
        print(f"model servers: SmolLM2-135M Q4_1, threads {args.threads}, n_ctx {N_CTX}, {args.calls} calls each, "
              f"{args.out_tokens} tokens out; logs in {log_dir}")  # fmt: skip
        print(
            "ready (load to first answer of /v1/models): " + ", ".join(f"{s.name} {s.ready_s:.1f} s" for s in servers)
        )
        for label, (rows, cuts, load0, load1) in results.items():
            print(f"\n{label} (loadavg {load0:.1f} -> {load1:.1f}), prompt {rows['prompt_tokens']} tokens")
            print(f"{'server':<26} {'TTFT s (median)':>16} {'prompt tok/s':>13} {'gen tok/s':>10} "
                  f"{'CPU s in 3 s after a cut':>25} {'next call s':>12}")  # fmt: skip
            for s in servers:
                r, c = rows[s.name], cuts[s.name]
                tg = statistics.median(r["tg"]) if r["tg"] else float("nan")
                print(f"{s.name:<26} {statistics.median(r['ttft']):>16.2f} {statistics.median(r['pp']):>13.0f} "
                      f"{tg:>10.1f} {c['cpu_3s_after']:>25.2f} {c['short_call_s']:>12.2f}")  # fmt: skip
            base = rows.get(f"llama-cpp-python t{args.threads[0]} passive")  # the old runtime, same policy
            for s in servers:
                r = rows[s.name]
                if base and not s.name.startswith("llama-cpp-python") and r["tg"] and base["tg"]:
                    print(f"{s.name:<26} / old passive: TTFT {statistics.median(r['ttft']) / statistics.median(base['ttft']):.2f}  "
                          f"prompt tok/s {statistics.median(r['pp']) / statistics.median(base['pp']):.2f}  "
                          f"gen tok/s {statistics.median(r['tg']) / statistics.median(base['tg']):.2f}")  # fmt: skip
        print(
            "\nRSS MB (now / peak): "
            + ", ".join(f"{s.name} {s.rss_mb()[0]:.0f} / {s.rss_mb()[1]:.0f}" for s in servers)
        )
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()
