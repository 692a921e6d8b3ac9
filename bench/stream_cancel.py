"""Does the embedded server (llama.cpp's own, from xllamacpp's wheel; llama-cpp-python's until
issue 42) stream usage, and does it stop generating when the client gives up, streaming and not?
Against the real embedded server.

Run: .venv/bin/python bench/stream_cancel.py [--smoke]   # --smoke: a 200-token long generation, for the test suite

1. A streamed call with `stream_options.include_usage`: is there a usage chunk (empty choices)?
2. Stop on close: a long generation (max_tokens 2000, end-of-text suppressed so it cannot stop
   early) is given up after 1 s, streamed (the stream closed) and not (a 1 s client timeout); then a
   short request is timed. The server runs one request at a time, so a server that kept going makes
   the short request wait for the rest of the generation. On a loaded host the timing is noisy, so
   the verdict is the server's own log: llama.cpp prints a request's generated-token count when its
   generation ends, so an abandoned request that ran on leaves one more count before the short one's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources.embedded_server import MODEL_ALIAS, EmbeddedServer  # noqa: E402
from resources.model_clients import OpenAIChatClient  # noqa: E402

GIVE_UP_S = 1.0
LONG_TOKENS = 2000  # the long generation; a server that runs on after the give-up finishes it first
SMOKE_LONG_TOKENS = 200
# SmolLM2's <|endoftext|> (0) and <|im_end|> (2), banned so the long generation runs all its tokens.
NO_END = {"0": -100, "2": -100}


def _body(max_tokens: int, stream: bool, **extra) -> dict:
    prompt = "Write a very long story about a lighthouse keeper." if max_tokens > 100 else "Say hi."
    return {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }


def short_call_s(client: OpenAIChatClient) -> float:
    started = time.monotonic()
    client.chat("Say hi.", schema=None, max_output_tokens=8, timeout_s=600)
    return time.monotonic() - started


def generated_tokens(log: str) -> list[str]:
    """llama.cpp's own count of each request's generated tokens ("eval time = ... / N runs")."""
    return [
        line.split("/")[-1].split("(")[0].strip()
        for line in Path(log).read_text().splitlines()
        if " eval time" in line and "prompt" not in line
    ]


def usage_in_stream(url: str) -> dict:
    events = []
    body = _body(16, True, stream_options={"include_usage": True})
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    usage_chunks = [e for e in events if e.get("usage")]
    return {
        "content_type": response.headers.get("content-type"),
        "chunks": len(events),
        "usage_chunks": usage_chunks,
        "last_chunk": events[-1] if events else None,
    }


def give_up(url: str, stream: bool, long_tokens: int) -> None:
    body = _body(long_tokens, stream, logit_bias=NO_END)
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=GIVE_UP_S) as response:
            started = time.monotonic()
            for _ in response.iter_bytes():
                if time.monotonic() - started >= GIVE_UP_S:
                    break  # leaving the block closes the stream
    except httpx.TimeoutException:
        pass  # the unstreamed call: the client's 1 s timeout closes the connection


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help=f"a {SMOKE_LONG_TOKENS}-token long generation")
    long_tokens = SMOKE_LONG_TOKENS if parser.parse_args().smoke else LONG_TOKENS
    with EmbeddedServer() as server:
        client = OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object")
        short_call_s(client)  # warm up
        idle = min(short_call_s(client) for _ in range(2))
        print(f"idle short request: {idle:.2f}s")
        print("usage in stream:", json.dumps(usage_in_stream(server.url), indent=1)[:1500])
        for stream in (True, False):
            counted = len(generated_tokens(server._log.name))
            give_up(server.url, stream, long_tokens)
            after = short_call_s(client)
            ran_on = len(generated_tokens(server._log.name)) - counted > 1
            verdict = "kept generating" if ran_on else "stopped"
            print(f"{'streamed' if stream else 'unstreamed'}: given up after {GIVE_UP_S:g}s; "
                  f"next short request {after:.2f}s -> {verdict}; "
                  f"tokens generated per request so far: {generated_tokens(server._log.name)}", flush=True)  # fmt: skip
            time.sleep(1)


if __name__ == "__main__":
    main()
