"""Writes the harness log samples beside this script: one small session in each format the
ingest reads besides Neo.mjs bundles (docs/ingest.md), as each harness writes it. No network, no
randomness: re-running it rewrites the same files byte for byte. Edit this script, not the logs.

    .venv/bin/python samples/harnesses/generate.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLAUDE_SESSION = "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90"
CODEX_SESSION = "01936a4e-7c1b-7d42-9a0e-3b5f2c8d1e67"

SERVER_PY = """import os
from http.server import HTTPServer, SimpleHTTPRequestHandler

host = os.environ.get("HOST", "127.0.0.1")
port = int(os.environ.get("PORT", "8000"))
print(f"serving on http://{host}:{port}/")
HTTPServer((host, port), SimpleHTTPRequestHandler).serve_forever()
"""
# A test run's output of some 60 KB: tool outputs this large are kept whole as turn text.
PYTEST_OUTPUT = (
    "".join(f"tests/test_server.py::test_port_from_env[{i}] PASSED {'.' * (i % 40)}\n" for i in range(1200))
    + "=========== 1200 passed in 4.21s ==========="
)


def jsonl(path: Path, rows: list) -> None:
    """Each row is a dict (one compact JSON line, as the harnesses write them) or a raw str."""
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def claude_code() -> None:
    common = {"sessionId": CLAUDE_SESSION, "cwd": "/home/dev/webapp", "version": "2.0.14", "gitBranch": "main"}
    uuids = iter(f"7c0e{i:04x}-1d2b-4f5a-8c3e-a1b2c3d4e5f6" for i in range(100))
    parent = None

    def event(kind: str, ts: str, message: dict, **extra) -> dict:
        nonlocal parent
        uuid = next(uuids)
        row = {"parentUuid": parent, "isSidechain": False, "userType": "external", **common, "type": kind,
               "message": message, "uuid": uuid, "timestamp": ts, **extra}  # fmt: skip
        parent = uuid
        return row

    def assistant(ts: str, *content: dict) -> dict:
        message = {"id": f"msg_01{ts[-6:-1].replace(':', '')}", "type": "message", "role": "assistant",
                   "model": "claude-sonnet-4-5-20250929", "content": list(content), "stop_reason": None,
                   "usage": {"input_tokens": 1200, "output_tokens": 88}}  # fmt: skip
        return event("assistant", ts, message, requestId="req_011CU")

    def tool_result(ts: str, tool_id: str, text: str) -> dict:
        content = [{"tool_use_id": tool_id, "type": "tool_result", "content": text}]
        return event("user", ts, {"role": "user", "content": content})

    rows = [
        {"type": "summary", "summary": "Server port from environment", "leafUuid": "7c0e0009-1d2b-4f5a-8c3e-a1b2c3d4e5f6"},
        event("user", "2026-11-18T09:00:00.000Z", {"role": "user", "content": "The dev server ignores PORT; make server.py read HOST and PORT from the environment, see https://github.com/acme/webapp/issues/311"}),
        assistant("2026-11-18T09:00:04.000Z", {"type": "thinking", "thinking": "Read server.py first, then check how the port is parsed.", "signature": "EqQBCkYIBxgCKkA"}),
        assistant("2026-11-18T09:00:05.000Z", {"type": "tool_use", "id": "toolu_01A", "name": "Read", "input": {"file_path": "/home/dev/webapp/server.py"}}),
        tool_result("2026-11-18T09:00:05.500Z", "toolu_01A", "\n".join(f"{n:>6}→{line}" for n, line in enumerate(SERVER_PY.splitlines(), 1))),
        assistant("2026-11-18T09:00:09.000Z", {"type": "text", "text": "server.py already reads `PORT`, but `HTTPServer` is built before `load_dotenv()` runs. I'll move the call up and add a test."}),
        assistant("2026-11-18T09:00:10.000Z", {"type": "tool_use", "id": "toolu_01B", "name": "Edit", "input": {"file_path": "/home/dev/webapp/server.py", "old_string": "import os\n", "new_string": "import os\n\nfrom dotenv import load_dotenv\n\nload_dotenv()\n"}}),
        tool_result("2026-11-18T09:00:10.300Z", "toolu_01B", "The file /home/dev/webapp/server.py has been updated."),
        assistant("2026-11-18T09:00:12.000Z", {"type": "tool_use", "id": "toolu_01C", "name": "Bash", "input": {"command": "python -m pytest tests/test_server.py -q", "description": "Run the server tests"}}),
        tool_result("2026-11-18T09:00:17.000Z", "toolu_01C", PYTEST_OUTPUT),
        assistant("2026-11-18T09:00:19.000Z", {"type": "text", "text": "All 1200 tests pass. `python server.py` now prints `serving on http://0.0.0.0:9000/` with HOST=0.0.0.0 PORT=9000 in `.env`."}),
        event("user", "2026-11-18T09:05:00.000Z", {"role": "user", "content": "<command-name>/clear</command-name>"}, isMeta=True),
        event("user", "2026-11-18T09:06:30.000Z", {"role": "user", "content": [{"type": "text", "text": "Also document it in README.md under Configuration."}]}),
        assistant("2026-11-18T09:06:35.000Z", {"type": "tool_use", "id": "toolu_01D", "name": "Edit", "input": {"file_path": "/home/dev/webapp/README.md", "old_string": "## Configuration\n", "new_string": "## Configuration\n\n`HOST` and `PORT` (default 127.0.0.1:8000), read from the environment or `.env`.\n"}}),
        tool_result("2026-11-18T09:06:36.000Z", "toolu_01D", "The file /home/dev/webapp/README.md has been updated."),
        assistant("2026-11-18T09:06:40.000Z", {"type": "text", "text": "Documented `HOST` and `PORT` in README.md § Configuration."}),
        {"type": "file-history-snapshot", "messageId": "7c0e000f-1d2b-4f5a-8c3e-a1b2c3d4e5f6", "snapshot": {"trackedFileBackups": {}}, "isSnapshotUpdate": False},
    ]  # fmt: skip
    jsonl(HERE / f"{CLAUDE_SESSION}.jsonl", rows)


def codex() -> None:
    def line(ts: str, kind: str, payload: dict) -> dict:
        return {"timestamp": ts, "type": kind, "payload": payload}

    def message(role: str, text: str) -> dict:
        part = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}

    rows = [
        line("2026-11-19T14:02:11.000Z", "session_meta", {"id": CODEX_SESSION, "timestamp": "2026-11-19T14:02:11.000Z", "cwd": "/home/dev/ingest-svc", "originator": "codex_cli_rs", "cli_version": "0.58.0", "instructions": None, "source": "cli", "model_provider": "openai"}),
        line("2026-11-19T14:02:11.100Z", "response_item", message("user", "<environment_context>\n  <cwd>/home/dev/ingest-svc</cwd>\n  <approval_policy>on-request</approval_policy>\n</environment_context>")),
        line("2026-11-19T14:02:15.000Z", "response_item", message("user", "Why does `make test` fail with ConnectionRefusedError on CI only?")),
        line("2026-11-19T14:02:15.000Z", "event_msg", {"type": "user_message", "message": "Why does `make test` fail with ConnectionRefusedError on CI only?", "images": []}),
        line("2026-11-19T14:02:15.200Z", "turn_context", {"cwd": "/home/dev/ingest-svc", "approval_policy": "on-request", "model": "gpt-5-codex", "effort": "medium", "summary": "auto"}),
        line("2026-11-19T14:02:18.000Z", "response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Checking the test fixture's database URL**"}], "content": None, "encrypted_content": "gAAAAABo9x"}),
        line("2026-11-19T14:02:19.000Z", "response_item", {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", "rg -n 'DATABASE_URL|localhost' tests/conftest.py"], "workdir": "/home/dev/ingest-svc"}), "call_id": "call_Q1"}),
        line("2026-11-19T14:02:19.800Z", "response_item", {"type": "function_call_output", "call_id": "call_Q1", "output": json.dumps({"output": "12:DATABASE_URL = os.environ.get(\"DATABASE_URL\", \"postgresql://localhost:5432/test\")\n31:    url = f\"http://{host}:{port}\"\n", "metadata": {"exit_code": 0, "duration_seconds": 0.1}})}),
        line("2026-11-19T14:02:20.000Z", "event_msg", {"type": "token_count", "info": None}),
        line("2026-11-19T14:02:25.000Z", "response_item", message("assistant", "On CI the Postgres service is named `db`, not `localhost`: tests/conftest.py falls back to postgresql://localhost:5432/test when DATABASE_URL is unset. Set `DATABASE_URL: postgresql://db:5432/test` in .github/workflows/ci.yml.")),
        line("2026-11-19T14:03:40.000Z", "response_item", message("user", "Do it.")),
        line("2026-11-19T14:03:44.000Z", "response_item", {"type": "custom_tool_call", "status": "completed", "call_id": "call_Q2", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: .github/workflows/ci.yml\n@@\n     env:\n+      DATABASE_URL: postgresql://db:5432/test\n*** End Patch"}),
        line("2026-11-19T14:03:44.500Z", "response_item", {"type": "custom_tool_call_output", "call_id": "call_Q2", "output": "Success. Updated the following files:\nM .github/workflows/ci.yml\n"}),
        line("2026-11-19T14:03:47.000Z", "response_item", message("assistant", "Added DATABASE_URL to the CI job's env in .github/workflows/ci.yml.")),
        # The CLI was still appending: a half-written last line (a reject until the file is complete).
        '{"timestamp":"2026-11-19T14:03:48.000Z","type":"event_msg","payload":{"type":"agent_mess',
    ]  # fmt: skip
    jsonl(HERE / f"rollout-2026-11-19T14-02-11-{CODEX_SESSION}.jsonl", rows)


def aider() -> None:
    text = """
# aider chat started at 2026-11-17 16:20:05

> /home/dev/.local/bin/aider --model gpt-4o
> Aider v0.86.1
> Main model: gpt-4o with diff edit format
> Git repo: .git with 42 files
> Repo-map: using 4096 tokens, auto refresh

#### add a --verbose flag to cli.py that sets the log level to DEBUG  

cli.py needs the flag on the parser and a call to `logging.basicConfig`:

cli.py
```python
<<<<<<< SEARCH
    parser.add_argument("--config", default="config.toml")
=======
    parser.add_argument("--config", default="config.toml")
    parser.add_argument("--verbose", action="store_true", help="log at DEBUG")
>>>>>>> REPLACE
```

> Tokens: 3.1k sent, 212 received. Cost: $0.0099 message, $0.0099 session.  
> Applied edit to cli.py  
> Commit 4e1f2a9 feat: Add --verbose flag to cli.py  

#### /run python -m pytest -q tests/test_cli.py  

> ....F  
> FAILED tests/test_cli.py::test_verbose - AssertionError: assert 'WARNING' == 'DEBUG'  
> 1 failed, 4 passed in 0.31s  
> Add command output to the chat? (Y)es/(N)o [Yes]: y  
> Added 3 lines of output to the chat.  

#### fix the failing test  
#### the level must be set before the first log call  

`logging.basicConfig` runs after `load_config()` logs its first line, so the root logger is
already configured. Pass `force=True`:

cli.py
```python
<<<<<<< SEARCH
    logging.basicConfig(level=level)
=======
    logging.basicConfig(level=level, force=True)
>>>>>>> REPLACE
```

See https://docs.python.org/3/library/logging.html#logging.basicConfig (`force`, added in 3.8).

> Tokens: 3.6k sent, 158 received. Cost: $0.01 message, $0.02 session.  
> Applied edit to cli.py  
> Commit 9b3c7d0 fix: Force logging config so --verbose takes effect  

# aider chat started at 2026-11-18 10:02:44

> /home/dev/.local/bin/aider --model gpt-4o
> Main model: gpt-4o with diff edit format

#### what does `http://` alone in config.toml's proxy key do?  

An empty host after the scheme: `urllib.parse.urlsplit("http://")` gives `netloc=''`, so the
client falls back to a direct connection. Set `proxy = "http://proxy.internal:3128"` or remove the key.

> Tokens: 1.2k sent, 61 received. Cost: $0.0036 message, $0.0036 session.  
"""
    (HERE / ".aider.chat.history.md").write_text(text, encoding="utf-8")


def swe_agent() -> None:
    problem = "We're currently solving the following issue within our repository.\nISSUE:\nTimeSeries: misleading exception when required column check fails (https://github.com/astropy/astropy/issues/13007)"
    steps = [
        ("Let's find where the required columns are checked.", "search_dir \"required columns\" astropy/timeseries",
         'Found 2 matches for "required columns" in /astropy__astropy/astropy/timeseries:\n/astropy__astropy/astropy/timeseries/core.py (2 matches)'),
        ("Open core.py at the check.", "open astropy/timeseries/core.py 77",
         "[File: /astropy__astropy/astropy/timeseries/core.py (103 lines total)]\n77:            if self.colnames[:len(required_columns)] != required_columns:\n78:                raise ValueError(\"{} object is invalid - expected '{}' \"\n79:                                 \"as the first column{} but found '{}'\""),
        ("Name the missing columns in the message.", "edit 77:79\n            if self.colnames[:len(required_columns)] != required_columns:\n                missing = [c for c in required_columns if c not in self.colnames]\n                raise ValueError(f\"{self.__class__.__name__} object is invalid - required columns missing: {missing}\")\nend_of_edit",
         "[File: /astropy__astropy/astropy/timeseries/core.py (103 lines total)]\nFile updated."),
        ("Run the reproduction.", "python reproduce.py",
         "ValueError: TimeSeries object is invalid - required columns missing: ['flux']"),
        ("The message names the column now. Submit.", "submit", "diff --git a/astropy/timeseries/core.py b/astropy/timeseries/core.py"),
    ]  # fmt: skip
    doc = {
        "environment": "swe_main",
        "trajectory": [
            {"response": f"DISCUSSION\n{t}\n\n```\n{a}\n```", "thought": f"DISCUSSION\n{t}\n", "action": a, "observation": o,
             "state": '{"open_file": "/astropy__astropy/astropy/timeseries/core.py", "working_dir": "/astropy__astropy"}', "execution_time": 0.4}
            for t, a, o in steps
        ],
        "history": [
            {"role": "system", "content": "SETTING: You are an autonomous programmer...", "agent": "primary"},
            {"role": "user", "content": problem, "agent": "primary"},
        ],
        "info": {"exit_status": "submitted", "submission": "diff --git a/astropy/timeseries/core.py ...", "model_stats": {"instance_cost": 0.41, "api_calls": 5}},
        "replay_config": json.dumps({"agent": {"model": {"name": "gpt-4o-2024-08-06", "per_instance_cost_limit": 3.0}}}),
    }  # fmt: skip
    (HERE / "astropy__astropy-13033.traj").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def mini_swe_agent() -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer. Your response must contain exactly ONE bash code block."},
        {"role": "user", "content": "Please solve this issue: `requests.get('http://')` raises IndexError instead of InvalidURL (https://github.com/psf/requests/issues/4498)."},
        {"role": "assistant", "content": "THOUGHT: Reproduce it first.\n\n```bash\npython -c \"import requests; requests.get('http://')\"\n```"},
        {"role": "user", "content": "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n  File \"requests/models.py\", line 384, in prepare_url\n    if host.startswith(u'*'):\nIndexError: string index out of range\n</output>"},
        {"role": "assistant", "content": "THOUGHT: Guard the empty host in prepare_url.\n\n```bash\nsed -i \"s/if host.startswith(u'\\*'):/if not host or host.startswith(u'*'):/\" requests/models.py && git diff\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\n-        if host.startswith(u'*'):\n+        if not host or host.startswith(u'*'):\n</output>"},
        {"role": "assistant", "content": "THOUGHT: Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```"},
        {"role": "user", "content": "diff --git a/requests/models.py b/requests/models.py"},
    ]  # fmt: skip
    doc = {
        "info": {"exit_status": "Submitted", "submission": "diff --git a/requests/models.py ...", "model_stats": {"instance_cost": 0.03, "api_calls": 3},
                 "mini_version": "1.9.0", "config": {"model": {"model_name": "claude-sonnet-4-20250514"}}},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
    }  # fmt: skip
    (HERE / "psf__requests-4498.traj.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    claude_code()
    codex()
    aider()
    swe_agent()
    mini_swe_agent()
