"""Claude Code session logs (`~/.claude/projects/<project>/<session-id>.jsonl`): one JSON event a line.

A turn is what a user would call one: a prompt they typed and everything the agent did until the
next one (its text, thinking, tool calls and their results), however many event lines that takes.
- `user` with typed text (a string, or `text` parts): starts a turn, id the event's `uuid`,
  session its `sessionId`, time its `timestamp`; `isMeta` ones (caveats and command bodies Claude
  Code writes itself) are skipped;
- `user` text that Claude Code writes or that is not a prompt (`NOTICE_PREFIXES`: slash-command
  wrappers and their output, bash-mode input and output, interruptions, task notifications, a
  message of `<system-reminder>`s only) is text of the turn in progress, in its response;
- a compaction summary (`isCompactSummary`, after `system/compact_boundary`) is the model's summary
  of the session so far, not the user's words: `[compacted context] …` in the thought of the turn
  in progress (the agent goes on from it);
- `user` holding `tool_result` parts: the results, in the current turn's response;
- `assistant`: `text` parts to the response, `thinking` to the thought, `tool_use` parts as
  `[tool Name] {input}` in the response (counted in `amount_tool_calls`, named in `tools_used`),
  `message.model` the turn's model (not the `<synthetic>` one of Claude Code's own notices);
- `system` with text (compaction, hook and error notices): `[system] …` in the response; one
  without text (`turn_duration`) folded and left out;
- each turn's `project` and `git_branch`: the latest `cwd` and `gitBranch` of its events.

Text of the turn in progress, when no turn has begun (a file that opens with a compaction or a
command), waits for the file's first turn; a file of nothing else is one turn of it.

Sub-agents (a `Task`/`Agent` call's work) are read once, from where Claude Code keeps them:
- a sub-agent's own file (`<session>/subagents/agent-<agentId>.jsonl` from 2.1, the flat
  `agent-<agentId>.jsonl` beside the session before): its lines carry the trunk's `sessionId`,
  `isSidechain` and their `agentId`; read as turns of the parent session, ids namespaced
  `<uuid>@agent-<agentId>` so they never replace a trunk turn; the first prompt is headed by the
  sidecar `agent-<agentId>.meta.json` (type, description, the spawning `toolUseId`). Lines that
  are copies of the trunk's own events (an `aside_question` or `acompact` agent replays the
  parent's conversation: its first prompt under the same `uuid`, its API responses under the same
  `message.id`, results of its tool calls) are skipped, when the trunk file is there to tell;
- in the session file itself (1.0's inline sidechains, `progress` events of `agent_progress` that
  carry each of the sub-agent's messages): the work of the turn that spawned it, marked
  `[subagent]`, unless the sub-agent's own file is there, which is then where it is read from.

Skipped, each with its reason: bookkeeping lines (`summary`, `file-history-snapshot`, `ai-title`,
`last-prompt`, `queue-operation`, `teleported-from`, `attachment`, other `progress`, …).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
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
    required_id,
    text_field,
    timestamp,
)
from digest.readers.harness import Harness, Head

KIND = "claude-code"
AGENT = "claude-code"
EVENT_TYPES = frozenset({"user", "assistant", "system"})
_SYNTHETIC_MODEL = "<synthetic>"

# Lines that are bookkeeping, by type and the key that marks them: a file of nothing else (a
# `teleported-from` stub, a session with only its title) is a Claude Code log whose lines are skipped.
_BOOKKEEPING = {
    "summary": "leafUuid",
    "file-history-snapshot": "messageId",
    "teleported-from": "remoteSessionId",
    "ai-title": "aiTitle",
    "custom-title": "customTitle",
    "last-prompt": "lastPrompt",
    "queue-operation": "operation",
    "agent-name": "agentName",
    "permission-mode": "permissionMode",
}
# User text that is not a prompt the user typed: what Claude Code writes around a slash command
# and its output, bash mode's input and output, an async sub-agent's result, an interruption.
NOTICE_PREFIXES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "[Request interrupted by user",
)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_AGENT_FILE = re.compile(r"agent-(.+)\.jsonl")


def sniff(head: Head) -> bool:
    """Claude Code's events carry `sessionId` and `uuid` beside a `type` of its own; a log of
    nothing but its bookkeeping lines is one too."""
    objs = head.objects
    if any(
        obj.get("type") in EVENT_TYPES and "sessionId" in obj and "uuid" in obj and "message" in obj for obj in objs
    ):
        return True
    return bool(objs) and all(_BOOKKEEPING.get(obj.get("type")) in obj for obj in objs)


def _is_notice(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith(NOTICE_PREFIXES) or (
        stripped.startswith("<system-reminder>") and not _REMINDER.sub("", stripped).strip()
    )


def _user_text(content) -> str | None:
    """A user event's text, or None when it holds tool results."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Reject(f"wrong-type: message.content is {type(content).__name__}, expected string or array")
    if any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
        return None
    return block_text(content)


def _place(obj: dict) -> tuple[str | None, str | None]:
    """The event's working directory and git branch (an empty one is none)."""
    return (text_field(obj, "cwd", "") or None), (text_field(obj, "gitBranch", "") or None)


class _Agent:
    """What a sub-agent's own file says of itself: its id, the head of its first prompt (from the
    sidecar meta.json), and what marks the trunk's own events (`_trunk_keys`), which it may replay."""

    def __init__(self, source: str, agent_id: str, session_id: str) -> None:
        self.id = agent_id
        path = Path(source)
        self.head = f"[subagent agent-{agent_id}]"
        self.headed = False
        try:
            meta = json.loads(path.with_name(f"agent-{agent_id}.meta.json").read_text(encoding="utf-8"))
            if isinstance(meta, dict):
                words = [str(meta[k]) for k in ("agentType", "description") if meta.get(k)]
                spawned = f"; spawned by {meta['toolUseId']}" if meta.get("toolUseId") else ""
                self.head = f"[subagent agent-{agent_id}: {': '.join(words)}{spawned}]"
        except (OSError, ValueError):  # no sidecar (an older CLI, a compaction agent): the plain head
            pass
        # The trunk: `<sid>.jsonl` beside the `<sid>/` folder, or beside a flat agent file.
        trunk_dir = path.parent.parent.parent if path.parent.name == "subagents" else path.parent
        trunk = trunk_dir / f"{session_id}.jsonl"
        try:
            stat = trunk.stat()
            self.trunk_name = trunk.name
            self.replayed = _trunk_keys(str(trunk), stat.st_size, stat.st_mtime_ns)
        except OSError:  # the trunk is not on disk: nothing can be told a copy
            self.trunk_name, self.replayed = None, frozenset()


@functools.lru_cache(maxsize=4)
def _trunk_keys(path: str, size: int, mtime_ns: int) -> frozenset[str]:
    """What marks a session file's own events (not its sidechains', which a sub-agent's file holds
    as its own): `u:` their `uuid`s, `m:` their API responses' `message.id`s, `t:` their tool calls'
    ids. Read once per version of the file (`size`, `mtime_ns`)."""
    found = set()
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if not isinstance(obj, dict) or obj.get("type") not in EVENT_TYPES or obj.get("isSidechain") is True:
                continue
            message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
            if isinstance(obj.get("uuid"), str):
                found.add(f"u:{obj['uuid']}")
            if obj["type"] == "assistant" and isinstance(message.get("id"), str):
                found.add(f"m:{message['id']}")
            content = message.get("content")
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "tool_use" and isinstance(part.get("id"), str):
                    found.add(f"t:{part['id']}")
    return frozenset(found)


def _replayed(obj: dict, trunk: frozenset[str]) -> bool:
    """A forked agent's copy of a trunk event: the same `uuid`, or a copy of the trunk's API response
    (its `message.id`, under a new `uuid` and `requestId`), or results of the trunk's tool calls."""
    if f"u:{obj.get('uuid')}" in trunk:
        return True
    message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
    if obj.get("type") == "assistant":
        return f"m:{message.get('id')}" in trunk
    content = message.get("content") if isinstance(message.get("content"), list) else []
    results = [p for p in content if isinstance(p, dict) and p.get("type") == "tool_result"]
    return bool(results) and all(f"t:{p.get('tool_use_id')}" in trunk for p in results)


class _Line:
    """One event as read and checked: what it adds to a turn (`ops`), and whether it starts one."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []
        self.model: str | None = None
        self.prompt = False  # typed text: a new turn
        self.work = False  # the agent's work (not only notices): a turn it opens is not a prefix


def _assistant_ops(line: _Line, content, mark: str) -> None:
    for part in content if isinstance(content, list) else [content]:
        kind_of = part.get("type") if isinstance(part, dict) else None
        if kind_of == "thinking":
            line.ops.append(("thought", block_text(part.get("thinking"))))
        elif kind_of == "tool_use":
            line.ops.append(("tool", str(part.get("name") or "tool"), mark + arguments_text(part.get("input"))))
        elif kind_of != "redacted_thinking":
            line.ops.append(("response", mark + block_text(part)))
    line.work = True


def _user_ops(line: _Line, obj: dict, content, sidechain: bool) -> None:
    """A user event: typed text (a prompt, or in a sidechain the sub-agent's task), notices and
    compaction summaries (text of the turn in progress), or tool results."""
    mark = "[subagent] " if sidechain else ""
    text = _user_text(content)
    if text is not None:
        if obj.get("isCompactSummary") is True:
            line.ops.append(("thought", f"[compacted context] {text}"))
        elif sidechain or _is_notice(text):
            line.ops.append(("response", mark + text))
        else:
            line.ops.append(("prompt", text))
            line.prompt = True
        return
    linked = obj.get("toolUseResult")
    agent = linked.get("agentId") if isinstance(linked, dict) and isinstance(linked.get("agentId"), str) else None
    for part in content:
        if isinstance(part, dict) and part.get("type") == "tool_result":
            label = "subagent tool result" if sidechain else "tool result"
            if agent:  # the trunk's result of a sub-agent's spawn: which agent did the work
                label = f"{label} of agent-{agent}"
            line.ops.append(("output", block_text(part.get("content")), label))
        else:
            line.ops.append(("response", mark + block_text(part)))
    line.work = True


def _apply(turn: PendingTurn, line: _Line) -> None:
    for op in line.ops:
        if op[0] == "tool":
            turn.tool(op[1], op[2])
        elif op[0] == "output":
            turn.output(op[1], op[2])
        else:
            getattr(turn, op[0]).append(op[1])
    if line.model and line.model != _SYNTHETIC_MODEL:
        turn.model = line.model


def _name_agent_id(source: str) -> str | None:
    match = _AGENT_FILE.fullmatch(Path(source).name)
    return match.group(1) if match else None


def _own_file(known: dict, source: str, session_id: str, agent_id: str) -> bool:
    """Whether the sub-agent has its own file beside this session file (looked up once an agent)."""
    if agent_id not in known:
        here = Path(source).parent
        paths = (here / session_id / "subagents" / f"agent-{agent_id}.jsonl", here / f"agent-{agent_id}.jsonl")
        known[agent_id] = any(path.is_file() for path in paths)
    return known[agent_id]


def _progress_event(obj: dict, source: str, known: dict) -> tuple[dict | None, str | None]:
    """A `progress` line: the sub-agent's message an `agent_progress` one carries, as an event of
    the trunk's turn, or the reason it is skipped."""
    data = obj.get("data")
    what = data.get("type") if isinstance(data, dict) else None
    if what != "agent_progress":
        return None, f"progress: {what or 'untyped'}, no turn text"
    message = data.get("message")
    if not isinstance(message, dict) or message.get("type") not in ("user", "assistant"):
        return None, "agent_progress: no message"
    agent_id = data.get("agentId")
    session_id = required_id(obj, "sessionId", "", "missing-session-id")
    if isinstance(agent_id, str) and _own_file(known, source, session_id, agent_id):
        return None, "agent_progress: read from the sub-agent's own file"
    # The trunk's line (its session, place and uuid) with the sub-agent's message in it.
    event = {**obj, "type": message["type"], "message": message.get("message"), "isSidechain": True}
    event["timestamp"] = message.get("timestamp") or obj.get("timestamp")
    return event, None


def read(lines: Lines, source: str) -> Iterator[Read]:
    turn: PendingTurn | None = None
    # A turn opened by notices only (a file that opens with a compaction or a command): the first
    # typed prompt takes it over, so it is not a turn of its own.
    prefix_only = False
    # A sub-agent's own file, told by its name or by its first event (a sidechain with an agentId).
    agent: _Agent | None = None
    decided = False
    own_files: dict[str, bool] = {}  # agentId → whether the sub-agent has its own file
    for line_no, raw in lines:
        if not raw.strip():
            yield Read("skip", line_no)
            continue
        try:
            obj, _ = load(decode(raw))
            kind = obj.get("type")
            progress = kind == "progress"
            if progress:
                obj, skipped = _progress_event(obj, source, own_files)
                if obj is None:
                    yield Read("skip", line_no, reason=skipped)
                    continue
                kind = obj["type"]
            elif kind not in EVENT_TYPES:
                yield Read("skip", line_no, reason=f"{kind or 'untyped'}: bookkeeping, no turn text")
                continue
            if obj.get("isMeta") is True:
                yield Read("skip", line_no, reason="isMeta: text Claude Code writes itself")
                continue
            session_id = required_id(obj, "sessionId", "", "missing-session-id")
            uuid = required_id(obj, "uuid", "", "missing-id")
            sidechain = obj.get("isSidechain") is True
            agent_id = obj.get("agentId") if isinstance(obj.get("agentId"), str) and not progress else None
            if not decided:
                decided = True
                agent_id = _name_agent_id(source) or (agent_id if sidechain else None)
                agent = _Agent(source, agent_id, session_id) if agent_id else None
                if agent is not None and line_no > 1:
                    # Read on from a later turn of a grown file (`digest.manifest`): its first
                    # prompt, before, already carries the head.
                    agent.headed = True
            if agent is not None:
                if _replayed(obj, agent.replayed):
                    yield Read("skip", line_no, reason=f"replayed: a copy of an event of {agent.trunk_name}")
                    continue
                sidechain = False  # the sub-agent's own turn: its task is its prompt
            elif sidechain and agent_id and _own_file(own_files, source, session_id, agent_id):
                yield Read("skip", line_no, reason="sidechain: read from the sub-agent's own file")
                continue
            line = _Line()
            if kind == "system":
                text = block_text(obj.get("content"))
                if text.strip():
                    line.ops.append(("response", f"[system] {text}"))
            else:
                message = obj.get("message")
                if not isinstance(message, dict):
                    raise Reject(f"wrong-type: message is {type(message).__name__}, expected object")
                content = message.get("content")
                if kind == "user":
                    _user_ops(line, obj, content, sidechain)
                else:
                    line.model = text_field(message, "model", "message.")
                    _assistant_ops(line, content, "[subagent] " if sidechain else "")
            project, branch = _place(obj)
            fresh = None
            if turn is None or line.prompt or turn.session_id != session_id:
                # Everything the line could be refused for is checked before the turn before it ends.
                fresh = PendingTurn(
                    turn_id=f"{uuid}@agent-{agent.id}" if agent else uuid,
                    session_id=session_id,
                    line_no=line_no,
                    first_line=raw,
                    ts_ms=timestamp(obj.get("timestamp"), ""),
                    agent=AGENT,
                )
        except Exception as exc:  # any content: this line's reject, never the run's end
            yield Read("reject", line_no, reason=reason_of(exc), excerpt=excerpt(raw))
            continue
        if turn is None and not line.ops:
            yield Read("skip", line_no, reason=f"{kind}: no text, and no turn to fold it into")
            continue
        if fresh is not None and prefix_only and line.prompt and turn.session_id == session_id:
            # The typed prompt takes over the turn its notices opened: its id, its line, its time.
            yield Read("fold", turn.line_no)
            turn.turn_id, turn.line_no, turn.first_line, turn.ts_ms = fresh.turn_id, line_no, raw, fresh.ts_ms
            prefix_only = False
        elif fresh is not None:
            if turn is not None:
                yield turn.finish(source)
            turn = fresh
            prefix_only = not line.prompt and not line.work
        else:
            yield Read("fold", line_no)
            prefix_only = prefix_only and not line.work
        if agent is not None and line.prompt and not agent.headed:
            turn.prompt.append(agent.head)
            agent.headed = True
        _apply(turn, line)
        turn.project, turn.git_branch = project or turn.project, branch or turn.git_branch
    if turn is not None:
        yield turn.finish(source)


def resume_context(row: dict) -> dict:
    """Nothing: each of its lines says its session, so a read goes on from any turn's first line."""
    return {}


def home(env: Mapping[str, str], user_home: Path) -> Path:
    """`${CLAUDE_CONFIG_DIR:-~/.claude}/projects`."""
    return (Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else user_home / ".claude") / "projects"


HARNESS = Harness(
    KIND,
    "Claude Code",
    read,
    sniff,
    resume_context=resume_context,
    home=home,
    file_tools={
        "Read": ("file-read", "file_path"),
        "Edit": ("file-edit", "file_path"),
        "MultiEdit": ("file-edit", "file_path"),
        "Write": ("file-create", "file_path"),
        "NotebookEdit": ("file-edit", "notebook_path"),
        "NotebookRead": ("file-read", "notebook_path"),
    },
    shell_tools=frozenset({"Bash"}),
)
