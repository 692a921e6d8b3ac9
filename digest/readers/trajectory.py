"""SWE-agent and mini-SWE-agent trajectories (`*.traj`, `*.traj.json`): one JSON document a run,
read whole (both harnesses write it indented, a step or message to a few lines).

- SWE-agent (`{"trajectory": [...], "history": [...], "info": {...}, "replay_config": ...}`): a turn
  per step, its `thought` the thought, its `action` a tool call (`[tool <command>] <action>`) and its
  `observation` the output, in the response; the first turn's prompt is the task (the first `user`
  entry of `history`). The rest of `history` (the prompts as the model saw them, which repeat the
  steps), `info` and the environment are dropped; the model is `replay_config`'s
  `agent.model.name` (or `model_name`).
- mini-SWE-agent (`{"info": {...}, "messages": [...], "trajectory_format": ...}`): a turn per
  `assistant` message with the messages after it (the command's output, as a `user` or `tool`
  message) as its output; the first turn's prompt is the task (the `user` messages before the
  first reply). The `system` message is dropped; the model is `info.config.model.model_name`.

The file holds no session id and no times: the session is `<file stem>-<10 hex digits>` (a hash of
the task and the first reply, so two runs of one task are two sessions), its turns
`<session>:00001`... in order, with no time. Each turn is counted at the line its step starts on,
the document's other lines folded into it; steps written on one line (a document not indented) are
one turn.
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
)

KIND = "trajectory"
_SWE_AGENT = re.compile(rb'"trajectory"\s*:\s*\[')
_MINI = re.compile(rb'"messages"\s*:\s*\[')
_DECODER = json.JSONDecoder()
_BLANK = re.compile(r"[ \t\r\n]*")


def sniff(head: bytes) -> bool:
    if not head.lstrip().startswith(b"{"):
        return False
    return bool(_SWE_AGENT.search(head)) or bool(
        _MINI.search(head) and (b'"info"' in head or b'"trajectory_format"' in head)
    )


def read(lines: Lines, source: str) -> Iterator[Read]:
    read_lines = list(lines)
    if not read_lines:
        return
    raw = b"".join(line for _, line in read_lines)
    try:
        text = decode(raw)
        doc = load_json(text, "file")
        turns = _swe_agent(doc, text) if isinstance(doc.get("trajectory"), list) else _mini(doc, text)
        if not turns:
            raise Reject("no-steps: the trajectory holds no step")
    except Reject as reason:
        first = read_lines[0][0]
        yield Read("reject", first, reason=str(reason), excerpt=excerpt(read_lines[0][1]))
        yield from (Read("fold", n) for n, _ in read_lines[1:])
        return
    starts = [0]
    for _, line in read_lines:
        starts.append(starts[-1] + len(line.decode("utf-8")))
    session_id = _session_id(source, turns)
    groups: dict[int, PendingTurn] = {}
    for position, fill in turns:
        line_no = read_lines[max(0, bisect.bisect_right(starts, position) - 1)][0]
        turn = groups.get(line_no)
        if turn is None:
            turn = groups[line_no] = PendingTurn(
                turn_id=f"{session_id}:{len(groups) + 1:05d}",
                session_id=session_id,
                line_no=line_no,
                first_line=read_lines[0][1],
                agent=doc_agent(doc),
                model=_model(doc),
            )
        fill(turn)
    for line_no, _ in read_lines:
        yield groups[line_no].finish(source) if line_no in groups else Read("fold", line_no)


def doc_agent(doc: dict) -> str:
    return "swe-agent" if isinstance(doc.get("trajectory"), list) else "mini-swe-agent"


def _swe_agent(doc: dict, text: str) -> list:
    steps = doc["trajectory"]
    history = doc.get("history") if isinstance(doc.get("history"), list) else []
    task = next((block_text(h.get("content")) for h in history if isinstance(h, dict) and h.get("role") == "user"), "")
    positions = _element_positions(text, "trajectory", len(steps))
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


def _mini(doc: dict, text: str) -> list:
    messages = doc.get("messages")
    if not isinstance(messages, list):
        raise Reject("not-a-trajectory: neither `trajectory` nor `messages` is a list")
    positions = _element_positions(text, "messages", len(messages))
    out = []
    replied = False
    for i, (message, position) in enumerate(zip(messages, positions)):
        if not isinstance(message, dict):
            raise Reject(f"wrong-type: messages[{i}] is {type(message).__name__}, expected object")
        role = message.get("role")
        if role == "system":
            continue
        # A turn starts at the task and at each reply after the first (which answers the task);
        # the outputs after a reply are its own.
        starts = not out or (role == "assistant" and replied)
        replied = replied or role == "assistant"

        def fill(turn: PendingTurn, message=message, role=role, task=not replied) -> None:
            content = block_text(message.get("content"))
            if task:
                turn.prompt.append(content)
            elif role == "assistant":
                turn.thought.append(block_text(message.get("reasoning_content")))
                turn.response.append(content)
                for call in message.get("tool_calls") or []:
                    function = call.get("function", {}) if isinstance(call, dict) else {}
                    turn.tool(str(function.get("name") or "tool"), arguments_text(function.get("arguments")))
                if not message.get("tool_calls") and (blocks := content.count("```bash")):
                    turn.tool_calls += blocks
                    turn.tools[:] = turn.tools if "bash" in turn.tools else [*turn.tools, "bash"]
            else:
                turn.output(content)

        out.append((position if starts else None, fill))
    return _anchor(out)


def _anchor(steps: list) -> list:
    """Messages that start no turn take the position of the one before them."""
    anchored, last = [], 0
    for position, fill in steps:
        last = position if position is not None else last
        anchored.append((last, fill))
    return anchored


def _element_positions(text: str, key: str, count: int) -> list[int]:
    """Where each element of the document's top-level array `key` starts in `text` (all 0 when it
    cannot be told, which makes them one turn)."""
    try:
        pos = _skip(text, 0)
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
                starts, pos = [], pos + 1
                while (pos := _skip(text, pos)) < len(text) and text[pos] != "]":
                    starts.append(pos)
                    _, pos = _DECODER.raw_decode(text, pos)
                    pos = _skip(text, pos)
                    pos += text[pos] == ","
                return starts if len(starts) == count else [0] * count
            _, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, pos)
            pos += text[pos] == ","
    except (ValueError, IndexError):
        return [0] * count


def _skip(text: str, pos: int) -> int:
    return _BLANK.match(text, pos).end()


def _model(doc: dict) -> str | None:
    """`replay_config`'s `agent.model` (SWE-agent, the config as JSON text) or `info.config.model`
    (mini-SWE-agent): its `name` or `model_name`."""
    config = doc.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    for path in ((config, "agent", "model"), (doc, "info", "config", "model")):
        node = path[0]
        for key in path[1:]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            name = node.get("name") or node.get("model_name")
            if isinstance(name, str) and name:
                return name
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
