"""The embedded model's server process: llama.cpp's own C++ server (its OpenAI-compatible HTTP API,
continuous batching, and a task cancelled when its client goes away) from the prebuilt `xllamacpp`
wheel, serving one GGUF on loopback until the process is killed.

`python -m resources.llama_server --model PATH --alias NAME --port N --n_ctx N --threads N`:
`resources.embedded_server.EmbeddedServer` starts it and stops it. It imports nothing of the project,
so the process holds the model and the server alone.
"""

from __future__ import annotations

import argparse
import signal


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m resources.llama_server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n_ctx", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--poll", type=int, default=None)
    args = parser.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.n_ctx
    # One sequence, the whole context for it: the project sends one call at a time per server (its
    # pacing decides), and a second slot would halve the context a prompt may fill.
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    if args.poll is not None:
        params.cpuparams.poll = params.cpuparams_batch.poll = args.poll
    # No download of anything, ever: the GGUF is a local file.
    params.offline = True
    params.endpoint_metrics = True
    server = xllamacpp.Server(params)  # loads the model, then serves from its own threads
    print(f"listening on {server.listening_address}", flush=True)
    # The server runs until this process ends: SIGTERM (left at its default, an immediate end, so no
    # generation in flight is waited for) or SIGKILL from its starter, or its starter's death.
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
