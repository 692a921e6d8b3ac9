"""Claude Code session logs (`~/.claude/projects/<project>/<session-id>.jsonl`): one JSON event a line.

A turn is what a user would call one: a prompt they typed and everything the agent did until the
next one (its text, thinking, tool calls and their results), however many event lines that takes.
- `user` with text content (a string, or `text` parts): starts a turn, id the event's `uuid`,
  session its `sessionId`, time its `timestamp`; `isMeta` ones (command caveats Claude Code writes
  itself) are skipped;
- `user` holding `tool_result` parts: the results, in the current turn's response;
- `assistant`: `text` parts to the response, `thinking` to the thought, `tool_use` parts as
  `[tool Name] {input}` in the response (counted in `amount_tool_calls`, named in `tools_used`),
  `message.model` the turn's model (not the `<synthetic>` one of Claude Code's own notices);
- `system` (compaction, hook and error notices): `[system] …` in the current turn's response;
- sidechain events (a Task subagent's work, `isSidechain`) read as the current turn's work;
- `summary`, `file-history-snapshot`, `queue-operation` and any other event type: skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

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
    required_id,
    text_field,
    timestamp,
)

KIND = "claude-code"
AGENT = "claude-code"
EVENT_TYPES = frozenset({"user", "assistant", "system"})
_SYNTHETIC_MODEL = "<synthetic>"


def sniff(objs: list[dict]) -> bool:
    """Claude Code's events carry `sessionId` and `uuid` beside a `type` of its own."""
    return any(
        obj.get("type") in EVENT_TYPES and "sessionId" in obj and "uuid" in obj and "message" in obj for obj in objs
    )


def _prompt_text(content) -> str | None:
    """A user event's typed text, or None when it holds only tool results."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Reject(f"wrong-type: message.content is {type(content).__name__}, expected string or array")
    if any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
        return None
    return block_text(content)


def read(lines: Lines, source: str) -> Iterator[Read]:
    turn: PendingTurn | None = None
    for line_no, raw in lines:
        if not raw.strip():
            yield Read("skip", line_no)
            continue
        try:
            obj, _ = load(decode(raw))
            kind = obj.get("type")
            if kind not in EVENT_TYPES or obj.get("isMeta") is True:
                yield Read("skip", line_no)
                continue
            session_id = required_id(obj, "sessionId", "", "missing-session-id")
            message = obj.get("message") if kind != "system" else {"content": obj.get("content")}
            if not isinstance(message, dict):
                raise Reject(f"wrong-type: message is {type(message).__name__}, expected object")
            content = message.get("content")
            prompt = _prompt_text(content) if kind == "user" else None
            sidechain = obj.get("isSidechain") is True
            starts = prompt is not None and not (sidechain and turn is not None)
            if turn is None or starts or turn.session_id != session_id:
                if turn is not None:
                    yield turn.finish(source)
                turn = PendingTurn(
                    turn_id=required_id(obj, "uuid", "", "missing-id"),
                    session_id=session_id,
                    line_no=line_no,
                    first_line=raw,
                    ts_ms=timestamp(obj.get("timestamp"), ""),
                    agent=AGENT,
                )
                outcome = "turn"
            else:
                outcome = "fold"
            _add(turn, kind, message, content, prompt, sidechain)
            if outcome == "fold":
                yield Read("fold", line_no)
        except Reject as reason:
            yield Read("reject", line_no, reason=str(reason), excerpt=excerpt(raw))
    if turn is not None:
        yield turn.finish(source)


def _add(turn: PendingTurn, kind: str, message: dict, content, prompt: str | None, sidechain: bool) -> None:
    mark = "[subagent] " if sidechain else ""
    if kind == "system":
        turn.response.append(f"[system] {block_text(content)}")
        return
    if kind == "user":
        if prompt is not None:
            (turn.response if sidechain or turn.prompt else turn.prompt).append(mark + prompt)
            return
        for part in content:
            if isinstance(part, dict) and part.get("type") == "tool_result":
                turn.output(block_text(part.get("content")), mark + "tool result")
            else:
                turn.response.append(mark + block_text(part))
        return
    model = text_field(message, "model", "message.")
    if model and model != _SYNTHETIC_MODEL:
        turn.model = model
    for part in content if isinstance(content, list) else [content]:
        kind_of = part.get("type") if isinstance(part, dict) else None
        if kind_of == "thinking":
            turn.thought.append(block_text(part.get("thinking")))
        elif kind_of == "tool_use":
            turn.tool(str(part.get("name") or "tool"), mark + arguments_text(part.get("input")))
        elif kind_of == "redacted_thinking":
            continue
        else:
            turn.response.append(mark + block_text(part))
