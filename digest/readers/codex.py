"""Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`): one `{timestamp, type,
payload}` line per item the CLI recorded.

A turn is a prompt the user typed and every item until the next one:
- `session_meta`: the session (`payload.id`), folded; `turn_context`: the model, folded;
- `response_item` `message` from the user: starts a turn, numbered in the file
  (`<session>:00001`), time the line's `timestamp`; the context the CLI sends itself
  (`<environment_context>`, `<user_instructions>`, AGENTS.md instructions) is skipped, as are
  `developer` and `system` messages;
- `message` from the assistant: the response; `reasoning`: its readable `summary` to the thought
  (the `encrypted_content` is dropped);
- `function_call` / `custom_tool_call` / `local_shell_call` / `web_search_call`: `[tool name]
  arguments` in the response; `function_call_output` / `custom_tool_call_output`: the output;
- `event_msg` (the UI's copy of the same items, token counts), `compacted` and other types: skipped.
The rollouts before `session_meta` existed (a first line `{id, timestamp, instructions}`, then bare
response items and `record_type` state lines) are read the same way.
"""

from __future__ import annotations

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
    load,
    reason_of,
    text_field,
    timestamp,
)

KIND = "codex"
AGENT = "codex"
LINE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
ITEM_TYPES = frozenset(
    {
        "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
        "custom_tool_call_output", "local_shell_call", "web_search_call",
    }
)  # fmt: skip
# What the CLI puts in a user message itself, not the user.
_CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<user_shell_command>")


def sniff(objs: list[dict]) -> bool:
    if any(obj.get("type") in LINE_TYPES and isinstance(obj.get("payload"), dict) for obj in objs):
        return True
    # The older rollout: its first line is the session, with the instructions it started under.
    first = objs[0] if objs else {}
    return {"id", "timestamp"} <= first.keys() and "instructions" in first and "session_id" not in first


def read(lines: Lines, source: str, resume: dict | None = None) -> Iterator[Read]:
    """`resume`: `resume_context` of the turn whose first line `lines` start at."""
    session_id = Path(source).name.removesuffix(".jsonl")  # until the file says
    model: str | None = None
    session_ts: int | None = None
    count = 0
    if resume:
        session_id, model, session_ts, count = (resume[k] for k in ("session_id", "model", "session_ts", "count"))
    turn: PendingTurn | None = None
    for line_no, raw in lines:
        if not raw.strip():
            yield Read("skip", line_no)
            continue
        try:
            kind, payload, ts = _line(raw)
            if kind == "session_meta":
                meta_id = text_field(payload, "id", "payload.")
                session_ts = timestamp(payload.get("timestamp", ts), "payload.")
                session_id = meta_id or session_id
            elif kind == "turn_context":
                model = text_field(payload, "model", "payload.") or model
            kept = kind == "response_item" and _kept(payload)
        except Exception as exc:  # any content: this line's reject, never the run's end
            yield Read("reject", line_no, reason=reason_of(exc), excerpt=excerpt(raw))
            continue
        if kind in ("session_meta", "turn_context"):
            if turn is not None:
                turn.model = model
            yield Read("fold", line_no)
            continue
        if not kept:
            yield Read("skip", line_no)
            continue
        if turn is None or (payload.get("type") == "message" and payload.get("role") == "user"):
            if turn is not None:
                yield turn.finish(source)
            count += 1
            turn = PendingTurn(
                turn_id=f"{session_id}:{count:05d}",
                session_id=session_id,
                line_no=line_no,
                first_line=raw,
                ts_ms=timestamp(ts, "") if ts is not None else session_ts,
                agent=AGENT,
                model=model,
            )
            _add(turn, payload)
            continue  # counted when the turn is done
        _add(turn, payload)
        yield Read("fold", line_no)
    if turn is not None:
        yield turn.finish(source)


def _line(raw: bytes) -> tuple[str | None, dict | None, object]:
    """The line's type, payload and timestamp (checked), the older rollout's lines read as the newer's."""
    obj, _ = load(decode(raw))
    kind, payload = obj.get("type"), obj.get("payload")
    if kind not in LINE_TYPES and kind in ITEM_TYPES:  # the older rollout's bare item
        kind, payload = "response_item", obj
    elif kind is None and "id" in obj and "timestamp" in obj:  # the older rollout's first line
        kind, payload = "session_meta", obj
    if kind in LINE_TYPES and not isinstance(payload, dict):
        raise Reject(f"wrong-type: payload is {type(payload).__name__}, expected object")
    ts = obj.get("timestamp")
    timestamp(ts, "")  # a bad one is the line's reject
    return kind, payload, ts


def _kept(item: dict) -> bool:
    kind = item.get("type")
    if kind not in ITEM_TYPES:
        return False
    if kind != "message":
        return True
    role = item.get("role")
    if role == "assistant":
        return True
    return role == "user" and not block_text(item.get("content")).lstrip().startswith(_CONTEXT_PREFIXES)


def _add(turn: PendingTurn, item: dict) -> None:
    kind = item.get("type")
    if kind == "message":
        (turn.prompt if item.get("role") == "user" else turn.response).append(block_text(item.get("content")))
    elif kind == "reasoning":
        turn.thought.append(block_text(item.get("summary")))
    elif kind in ("function_call", "custom_tool_call"):
        turn.tool(str(item.get("name") or kind), arguments_text(item.get("arguments", item.get("input"))))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        turn.output(_output_text(item.get("output")))
    elif kind == "local_shell_call":
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        command = action.get("command")
        turn.tool("shell", " ".join(map(str, command)) if isinstance(command, list) else arguments_text(command))
    else:  # web_search_call
        turn.tool("web_search", arguments_text(item.get("action")))


def _output_text(output) -> str:
    """A call's output: a string, `{content, success}` as older rollouts write it, or content parts."""
    if isinstance(output, dict) and "content" in output:
        return block_text(output["content"])
    return block_text(output)


def resume_context(row: dict) -> dict:
    """What `read` needs to go on from this turn's first line, as `digest.manifest` reads a growing
    rollout from the turn open at its end: the session (from the head's `session_meta`), the model,
    the turns counted before it, and the session's time (the time of an older rollout's turns,
    whose lines have none)."""
    return {
        "session_id": row["session_id"],
        "model": row["model"],
        "count": int(row["id"].rsplit(":", 1)[1]) - 1,
        "session_ts": row["ts_ms"],
    }
