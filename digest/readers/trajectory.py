"""SWE-agent and mini-SWE-agent trajectories (`*.traj`, `*.traj.json`): one JSON document a run,
read whole (both harnesses write it indented, a step or message to a few lines).

- SWE-agent (`{"trajectory": [...], "history": [...], "info": {...}, "replay_config": ...}`): a turn
  per step, its `thought` the thought, its `action` a tool call (`[tool <command>] <action>`) and its
  `observation` the output, in the response; the first turn's prompt is the task (the first `user`
  entry of `history` that is not a demonstration: `is_demo` entries are another task's worked
  example, injected from the config's demonstration file). A file holding only `history` (no
  `trajectory`) is read from it, as mini-SWE-agent's messages are. The model is `replay_config`'s
  `agent.model.name` (or `model_name`); the project the repository `replay_config` names.
- mini-SWE-agent (`{"info": {...}, "messages": [...], "trajectory_format": ...}`, or a bare JSON
  array of messages): a turn per `assistant` message with the messages after it (the command's
  output, as a `user` or `tool` message) as its output; the first turn's prompt is the task (the
  `user` messages before the first reply). The `system` message is dropped; the model is
  `info.config.model.model_name`; a turn's time is its first message's `extra.timestamp` (epoch
  seconds, as mini-SWE-agent 2 records each message's).

The session is `<file stem>-<10 hex digits>` (a hash of the task and the first reply, so two runs
of one task are two sessions), its turns `<session>:00001`... in order. Each turn is counted at the
line its step starts on, the document's other lines folded into it; steps written on one line (a
document not indented) are one turn.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from digest.readers.common import (
    Lines,
    PendingTurn,
    Read,
    Reject,
    arguments_text,
    block_text,
    decode,
    excerpt,
    load_json,
    reason_of,
    without_lone_surrogates,
)
from digest.readers.harness import Harness, Head
from digest.turns import parse_timestamp_ms

KIND = "trajectory"
_SWE_AGENT = re.compile(rb'"trajectory"\s*:\s*\[')
_HISTORY = re.compile(rb'"history"\s*:\s*\[')
_MINI = re.compile(rb'"messages"\s*:\s*\[')
_BARE_MESSAGES = re.compile(rb"\A\s*\[\s*\{")
_ROLE = re.compile(rb'"role"\s*:\s*"(?:system|user|assistant)"')
_DECODER = json.JSONDecoder()
_BLANK = re.compile(r"[ \t\r\n]*")


def sniff(head: Head) -> bool:
    data = head.data
    if _BARE_MESSAGES.match(data):  # mini-SWE-agent's bare message list
        return bool(_ROLE.search(data)) and b'"content"' in data
    if not data.lstrip().startswith(b"{"):
        return False
    if _SWE_AGENT.search(data):
        return True
    if _HISTORY.search(data) and _ROLE.search(data):  # SWE-agent's, holding only its history
        return any(key in data for key in (b'"info"', b'"replay_config"', b'"environment"', b'"message_type"'))
    return bool(_MINI.search(data) and (b'"info"' in data or b'"trajectory_format"' in data))


def read(lines: Lines, source: str) -> Iterator[Read]:
    read_lines = list(lines)
    if not read_lines:
        return
    raw = b"".join(line for _, line in read_lines)
    try:
        groups = _turns(raw, read_lines, source)
    except Exception as exc:  # any content: this file's reject, never the run's end
        yield Read("reject", read_lines[0][0], reason=reason_of(exc), excerpt=excerpt(read_lines[0][1]))
        yield from (Read("fold", n) for n, _ in read_lines[1:])
        return
    for line_no, _ in read_lines:
        yield groups[line_no].finish(source) if line_no in groups else Read("fold", line_no)


def _turns(raw: bytes, read_lines: list[tuple[int, bytes]], source: str) -> dict[int, PendingTurn]:
    """The document's turns by the line each starts on."""
    text = decode(raw)
    if text.lstrip().startswith("["):  # a bare message list: read as mini-SWE-agent's `messages`
        doc = {"messages": _load_list(text)}
        steps = _messages(doc, "messages", text, None)
    else:
        doc = load_json(text, "file")
        if isinstance(doc.get("trajectory"), list):
            steps = _swe_agent(doc, text)
        elif isinstance(doc.get("history"), list) and not isinstance(doc.get("messages"), list):
            steps = _messages(doc, "history", text, "history")
        else:
            steps = _messages(doc, "messages", text, "messages")
    if not steps:
        raise Reject("no-steps: the trajectory holds no step")
    starts = [0]
    for _, line in read_lines:
        starts.append(starts[-1] + len(line.decode("utf-8")))
    session_id = _session_id(source, steps)
    agent, model, project = doc_agent(doc), _model(doc), _project(doc)
    groups: dict[int, PendingTurn] = {}
    for position, fill in steps:
        line_no, line = read_lines[max(0, bisect.bisect_right(starts, position) - 1)]
        turn = groups.get(line_no)
        if turn is None:
            turn = groups[line_no] = PendingTurn(
                turn_id=f"{session_id}:{len(groups) + 1:05d}",
                session_id=session_id,
                line_no=line_no,
                first_line=line,
                agent=agent,
                model=model,
                project=project,
            )
        fill(turn)
    return groups


def _load_list(text: str) -> list:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Reject(f"json-parse: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # a 4300+ digit number, nesting too deep
        raise Reject(f"json-parse: {exc}"[:300]) from None
    if not isinstance(value, list):
        raise Reject(f"not-a-trajectory: the file holds a JSON {type(value).__name__}")
    return without_lone_surrogates(value)


def doc_agent(doc: dict) -> str:
    if isinstance(doc.get("trajectory"), list) or (
        not isinstance(doc.get("messages"), list) and isinstance(doc.get("history"), list)
    ):
        return "swe-agent"
    return "mini-swe-agent"


def _is_demo(entry) -> bool:
    return isinstance(entry, dict) and entry.get("is_demo") is True


def _swe_agent(doc: dict, text: str) -> list:
    steps = doc["trajectory"]
    history = doc.get("history") if isinstance(doc.get("history"), list) else []
    task = next(
        (
            block_text(h.get("content"))
            for h in history
            if isinstance(h, dict) and h.get("role") == "user" and not _is_demo(h)
        ),
        "",
    )
    positions = element_positions(text, "trajectory", len(steps))
    out = []
    for i, (step, position) in enumerate(zip(steps, positions)):
        if not isinstance(step, dict):
            raise Reject(f"wrong-type: trajectory[{i}] is {type(step).__name__}, expected object")

        def fill(turn: PendingTurn, step=step, first=i == 0) -> None:
            if first and task:
                turn.prompt.append(task)
            turn.thought.append(block_text(step.get("thought")) or block_text(step.get("response")))
            action = block_text(step.get("action")).strip()
            if action:
                turn.tool(action.split(None, 1)[0][:50], action)
            turn.output(block_text(step.get("observation")))

        out.append((position, fill))
    return out


def _messages(doc: dict, field: str, text: str, key: str | None) -> list:
    """A message list (mini-SWE-agent's `messages`, SWE-agent's `history`) as steps: the task and
    the first reply one turn, each later reply a turn with the messages after it as its output.
    `key` is where the list is in the document (None: the document is the list)."""
    messages = doc.get(field)
    if not isinstance(messages, list):
        raise Reject("not-a-trajectory: neither `trajectory`, `messages` nor `history` is a list")
    positions = element_positions(text, key, len(messages))
    out = []
    replied = False
    for i, (message, position) in enumerate(zip(messages, positions)):
        if not isinstance(message, dict):
            raise Reject(f"wrong-type: {field}[{i}] is {type(message).__name__}, expected object")
        role = message.get("role")
        if role == "system" or _is_demo(message):
            continue
        # A turn starts at the task and at each reply after the first (which answers the task);
        # the outputs after a reply are its own.
        starts = not out or (role == "assistant" and replied)
        replied = replied or role == "assistant"

        # The task is what the user said before the first reply; a run that ended before any reply
        # (its model call failed) still ends on its `exit`, the harness's words, not the user's.
        task = not replied and role != "exit"

        def fill(turn: PendingTurn, message=message, role=role, task=task, at=i) -> None:
            content = block_text(message.get("content"))
            if turn.ts_ms is None:
                turn.ts_ms = _message_time(message, f"{field}[{at}]")
            if task:
                turn.prompt.append(content)
            elif role == "assistant" and isinstance(message.get("action"), str):
                # SWE-agent's history: the content is the thought and the action, which it also keeps apart.
                turn.thought.append(block_text(message.get("thought")) or content)
                action = message["action"].strip()
                if action:
                    turn.tool(action.split(None, 1)[0][:50], action)
            elif role == "assistant":
                turn.thought.append(block_text(message.get("reasoning_content")))
                turn.response.append(content)
                calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
                for call in calls:
                    function = call.get("function") if isinstance(call, dict) else None
                    function = function if isinstance(function, dict) else {}
                    turn.tool(str(function.get("name") or "tool"), arguments_text(function.get("arguments")))
                if not calls and (blocks := content.count("```bash") + content.count("```mswea_bash_command")):
                    turn.tool_calls += blocks
                    turn.tools[:] = turn.tools if "bash" in turn.tools else [*turn.tools, "bash"]
            elif role == "exit":  # mini-SWE-agent 2's last message: how the run ended
                turn.output(content, label="exit")
            else:
                turn.output(content)

        out.append((position if starts else None, fill))
    return _anchor(out)


def _message_time(message: dict, where: str) -> int | None:
    """mini-SWE-agent 2's `extra.timestamp` (epoch seconds), checked: a bad one is the file's reject."""
    extra = message.get("extra")
    if not isinstance(extra, dict) or extra.get("timestamp") is None:
        return None
    try:
        return parse_timestamp_ms(extra["timestamp"], seconds=True)
    except ValueError as exc:
        raise Reject(f"bad-timestamp: {where}.extra.timestamp: {exc}") from None


def _anchor(steps: list) -> list:
    """Messages that start no turn take the position of the one before them."""
    anchored, last = [], 0
    for position, fill in steps:
        last = position if position is not None else last
        anchored.append((last, fill))
    return anchored


def element_positions(text: str, key: str | None, count: int) -> list[int]:
    """Where each element of the document's top-level array `key` (None: the document is the
    array) starts in `text` (all 0 when it cannot be told, which makes them one turn)."""
    try:
        pos = _skip(text, 0)
        if key is None:
            return _array_starts(text, pos, count)
        if text[pos] != "{":
            return [0] * count
        pos += 1
        while True:
            pos = _skip(text, pos)
            if text[pos] == "}":
                return [0] * count
            name, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, _skip(text, pos) + 1)  # past the colon
            if name == key and text[pos] == "[":
                return _array_starts(text, pos, count)
            _, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, pos)
            pos += text[pos] == ","
    except (ValueError, IndexError):
        return [0] * count


def _array_starts(text: str, pos: int, count: int) -> list[int]:
    if text[pos] != "[":
        return [0] * count
    starts, pos = [], pos + 1
    while (pos := _skip(text, pos)) < len(text) and text[pos] != "]":
        starts.append(pos)
        _, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        pos += text[pos] == ","
    return starts if len(starts) == count else [0] * count


def _skip(text: str, pos: int) -> int:
    return _BLANK.match(text, pos).end()


def _replay_config(doc: dict):
    config = doc.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    return config


def _get(node, *keys):
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _model(doc: dict) -> str | None:
    """`replay_config`'s `agent.model` (SWE-agent, the config as JSON text) or `info.config.model`
    (mini-SWE-agent): its `name` or `model_name`."""
    for node in (_get(_replay_config(doc), "agent", "model"), _get(doc, "info", "config", "model")):
        if isinstance(node, dict):
            name = node.get("name") or node.get("model_name")
            if isinstance(name, str) and name:
                return name
    return None


def _project(doc: dict) -> str | None:
    """The repository SWE-agent worked in, as its `replay_config` names it: `env.repo`'s
    `github_url`, `path` or `repo_name` (1.x), or `environment.repo_path` (0.x); else None."""
    config = _replay_config(doc)
    repo = _get(config, "env", "repo")
    for value in (
        *(_get(repo, key) for key in ("github_url", "path", "repo_name")),
        _get(config, "environment", "repo_path"),
    ):
        if isinstance(value, str) and value.strip():
            return value
    return None


def _session_id(source: str, turns: list) -> str:
    name = Path(source).name
    for suffix in (".traj.json", ".traj", ".json"):
        name = name.removesuffix(suffix)
    probe = PendingTurn("", "", 0, b"")
    for _, fill in turns[:2]:
        fill(probe)
    seed = "\n".join(probe.prompt + probe.response).encode("utf-8", "replace")
    return f"{name}-{hashlib.sha256(seed).hexdigest()[:10]}"


# One JSON document its harness rewrites after each step: read again whole.
HARNESS = Harness(KIND, "trajectory", read, sniff, suffixes=(".traj", ".json"))
