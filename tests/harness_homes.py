"""Claude Code and Codex CLI logs written in their real layouts, for the walk, the incremental
reads, the watch sensor and the benchmark: `~/.claude/projects/<munged-cwd>/<session>.jsonl` with
`<session>/subagents/agent-*.jsonl` (and its `.meta.json`) and an older CLI's flat `agent-*.jsonl`;
`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl` and the legacy flat `sessions/rollout-*.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path

PROJECT = "-home-dev-app"


def claude_turn(session: str, n: int, tools: int = 1, text: str = "", sidechain: bool = False) -> list[str]:
    """One turn of a Claude Code session: the prompt, then per tool an assistant tool_use and the
    user event carrying its result, then the answer; each event a line."""
    base = {"sessionId": session, "isSidechain": sidechain, "cwd": "/home/dev/app", "version": "2.1.3"}
    uid = f"{session}-{n:05d}"

    def event(kind: str, k: str, message: dict, second: int) -> str:
        stamp = f"2026-11-18T09:{n % 60:02d}:{second:02d}Z"
        return json.dumps({**base, "type": kind, "uuid": f"{uid}-{k}", "timestamp": stamp, "message": message})

    lines = [event("user", "p", {"role": "user", "content": f"prompt {n} {text}"}, 0)]
    for t in range(tools):
        call = {"type": "tool_use", "id": f"c{n}-{t}", "name": "Bash", "input": {"command": f"ls {t}"}}
        lines.append(event("assistant", f"a{t}", {"model": "claude-opus-4", "content": [call]}, 1 + 2 * t % 58))
        result = {"type": "tool_result", "tool_use_id": f"c{n}-{t}", "content": f"out {t} {text}"}
        lines.append(event("user", f"r{t}", {"role": "user", "content": [result]}, 2 + 2 * t % 58))
    lines.append(event("assistant", "z", {"model": "claude-opus-4", "content": [{"type": "text", "text": "done"}]}, 59))
    return lines


def codex_head(session: str) -> list[str]:
    return [
        _codex_line("session_meta", {"id": session, "timestamp": "2026-11-19T14:02:11Z", "cwd": "/home/dev/app"}),
        _codex_line("turn_context", {"model": "gpt-5-codex", "cwd": "/home/dev/app"}),
    ]


def codex_turn(n: int, tools: int = 1, text: str = "") -> list[str]:
    """One Codex turn: the user message, per tool a function_call and its output, the answer."""
    lines = [_codex_line("response_item", {"type": "message", "role": "user",
                                           "content": [{"type": "input_text", "text": f"prompt {n} {text}"}]})]  # fmt: skip
    for t in range(tools):
        lines.append(_codex_line("response_item", {"type": "function_call", "name": "shell",
                                                   "arguments": json.dumps({"command": ["ls", str(t)]}), "call_id": f"c{n}-{t}"}))  # fmt: skip
        lines.append(_codex_line("response_item", {"type": "function_call_output", "call_id": f"c{n}-{t}",
                                                   "output": f"out {t} {text}"}))  # fmt: skip
    lines.append(_codex_line("response_item", {"type": "message", "role": "assistant",
                                               "content": [{"type": "output_text", "text": "done"}]}))  # fmt: skip
    return lines


def _codex_line(kind: str, payload: dict) -> str:
    return json.dumps({"timestamp": "2026-11-19T14:02:11.000Z", "type": kind, "payload": payload})


def write_lines(path: Path, lines: list[str], mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode, encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))
    return path


def claude_home(root: Path, session: str = "5f1c2d3e-0000-4000-8000-000000000001") -> dict[str, Path]:
    """`root/.claude/projects` with a session, its sub-agent (current layout, with its meta file)
    and an older CLI's flat sub-agent file."""
    project = root / ".claude" / "projects" / PROJECT
    main = write_lines(project / f"{session}.jsonl", claude_turn(session, 1) + claude_turn(session, 2))
    sub = write_lines(project / session / "subagents" / "agent-a1b2c3.jsonl", claude_turn(session, 3, sidechain=True))
    meta = project / session / "subagents" / "agent-a1b2c3.meta.json"
    meta.write_text(json.dumps({"agentType": "general-purpose", "description": "look", "toolUseId": "c1-0"}))
    flat = write_lines(project / "agent-0d9e8f.jsonl", claude_turn("7a7a7a7a-old", 1, sidechain=True))
    return {"main": main, "subagent": sub, "meta": meta, "flat": flat}


def codex_home(root: Path, session: str = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b") -> dict[str, Path]:
    """`root/.codex/sessions` with a dated rollout and a legacy flat one."""
    sessions = root / ".codex" / "sessions"
    dated = write_lines(
        sessions / "2026" / "11" / "19" / f"rollout-2026-11-19T14-02-11-{session}.jsonl",
        codex_head(session) + codex_turn(1) + codex_turn(2),
    )
    legacy = write_lines(sessions / "rollout-legacy.jsonl", codex_head("legacy-0001") + codex_turn(1))
    return {"dated": dated, "legacy": legacy}
