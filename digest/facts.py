"""Facts a coding-agent user searches by, read from a stored turn with no model call: the files it
read, edited and created, the commands it ran (with their exit status where the log records it),
the errors it met, the tallies of its test runs, the commits it made or looked at, and the issues
and pull requests it names.

Every harness reader writes a turn's tool calls into its response as lines `[tool Name] arguments`
and their outputs as `[tool result] …`, `[output] …` or `[subagent tool result] …`
(`digest.readers.common.PendingTurn`); a call and its output are paired in order (the readers keep
no call ids). A log that holds its tool calls only as text (Claude Code's `/export`, SpecStory,
console transcripts) is read by `digest.text_facts`, for every harness's prose. What each
harness's log lets us recover, and what not: docs/ingest.md.

The work per turn is bounded: the text read is capped (`MAX_TEXT_CHARS`, and each output's head and
tail, `OUTPUT_WINDOW`), a line is read to `MAX_LINE_CHARS`, the patterns are anchored with bounded
repeats (no nested quantifiers, so no catastrophic backtracking), and a turn keeps at most
`MAX_FACTS` facts, deduplicated.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from digest.readers import HARNESSES
from digest.text_facts import MAX_LINE_CHARS, TEXT_WINDOW, hinted_lines, line_facts, text_calls
from digest.text_facts import capped as _capped

KINDS = ("file-read", "file-edit", "file-create", "command", "error", "commit", "issue", "pr", "test")
FILE_KINDS = ("file-read", "file-edit", "file-create")

MAX_TEXT_CHARS = 4_000_000  # of a turn's prompt and response: the head and tail halves beyond
OUTPUT_WINDOW = 8_000  # of one tool output, head and tail: where exit codes, errors and commits are
PROSE_WINDOW = 32_000  # of the text between tool calls
MAX_ARGS_CHARS = 512_000  # a tool call's arguments parsed as JSON (a Write's content can be large)
MAX_SCRIPT_LINES = 50  # of one shell command, read for the files it reads or edits
MAX_FACTS = 200
MAX_VALUE_CHARS = 500


@dataclass(frozen=True)
class Fact:
    kind: str  # one of KINDS
    value: str  # the path, the command line, the error text, the hash, the reference
    detail: str | None = None  # the tool; a command's `exit N`; a commit's subject; a tally's outcome


# --- the turn's text as tool calls, outputs and prose ---------------------------------------------

_MARK = re.compile(r"^\[(tool [^\]\s]{1,100}|tool result|output|subagent tool result|system)\] ?", re.M)
_OUTPUT_LABELS = ("tool result", "output", "subagent tool result")


@dataclass
class _Segment:
    label: str  # "prose", "tool", an output label, "system"
    text: str
    name: str | None = None  # a tool's name


def _segments(response: str) -> Iterator[_Segment]:
    position, label, name = 0, "prose", None
    for match in _MARK.finditer(response):
        yield _Segment(label, response[position : match.start()], name)
        marked = match.group(1)
        label, name = ("tool", marked[5:]) if marked.startswith("tool ") and marked != "tool result" else (marked, None)
        position = match.end()
    yield _Segment(label, response[position:], name)


def _lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        yield line[:MAX_LINE_CHARS].rstrip()


# --- patterns over lines (anchored, bounded) ---------------------------------------------------

# aider's own output lines are `> ` quoted, pytest marks an exception line `E   `.
_QUOTE = re.compile(r"^(?:> ?)?(?:E {2,12})?")
_EXCEPTION = re.compile(
    r"^(?:Caused by: |Uncaught |Exception in thread \"[^\"]{0,100}\" )?"
    r"((?:[A-Za-z_]\w{0,60}\.){0,8}(?:[A-Za-z_]\w{0,60})?(?:Error|Exception))(?:: ?(.*))?$"
)
_COMPILER = re.compile(
    r"^(?:(error\[E\d{4}\]: .+)"  # rustc
    r"|(\S{1,300}:\d{1,7}:\d{1,7}: (?:fatal )?error: .+)"  # gcc, clang
    r"|(error: .+)"  # cargo, git, pip
    r"|(panic: .+))$"  # go
)
_TYPESCRIPT = re.compile(r"error (TS\d{4,5}): (.+)$")
_TEST_FAILED = re.compile(r"^((?:FAILED|FAIL:?|--- FAIL:)\s{1,4}\S.*)$")
_NPM = re.compile(r"^npm (?:ERR!|error) (.+)$")
_NPM_TRIVIA = re.compile(r"^(?:errno|path|syscall|A complete log|Log files|\s*$|$)")
# A commit git made (`[main 1a2b3c4] subject`), one it shows (`commit <40 hex>`), one aider made.
_COMMIT = re.compile(
    r"^(?:> )?(?:\[(?:detached HEAD|[^\]\s]{1,100})(?: \(root-commit\))? ([0-9a-f]{7,40})\] (.+)"
    r"|commit ([0-9a-f]{40})\b|Commit ([0-9a-f]{7,40}) (.+))",
    re.M,
)
# What an error line holds somewhere: only the lines with one are read line by line.
_ERROR_HINT = re.compile(r"Error|Exception|error|FAIL|panic: |npm ")
_AIDER_FILE = re.compile(r"^(Applied edit to|Creating empty file|Added) (\S{1,1000})(?: to the chat\.?)?$")
_ISSUE_URL = re.compile(
    r"github\.com/([\w.-]{1,100}/[\w.-]{1,100})/(issues|pull)/(\d{1,9})"
    r"|gitlab\.com/([\w.-]{1,100}(?:/[\w.-]{1,100}){1,5})/-/(issues|merge_requests)/(\d{1,9})"
)
# A `#N` is a reference by what comes just before it (a bare `#N` is not one).
_HASH_NUMBER = re.compile(r"#(\d{1,7})\b")
_BEFORE_PR = re.compile(r"\b(?:PR|pull request|merge request|MR) ?\Z", re.I)
_BEFORE_ISSUE = re.compile(r"\b(?:issues?|fix(?:e[sd])?|close[sd]?|resolve[sd]?|refs?|see|bug|ticket) ?:? ?\Z", re.I)
_BEFORE_REPO = re.compile(r"(?<![\w/.-])([A-Za-z0-9][\w.-]{0,99}/[\w.-]{1,100})\Z")
_GH_COMMAND = re.compile(r"\bgh (issue|pr) (?:view|checkout|merge|close|reopen|edit|comment|diff|review) #?(\d{1,7})\b")
# Exit statuses as harnesses write them at the head of an output (Claude Code: only a failure's).
_EXIT_HEAD = re.compile(
    r"^(?:Exit code:? (-?\d{1,5})|Process exited with code (-?\d{1,5})|<returncode>(-?\d{1,5})</returncode>)", re.M
)
_EXIT_JSON = re.compile(r"\"exit_code\"\s?:\s?(-?\d{1,5})")


def _errors(text: str) -> Iterator[str]:
    npm = 0
    for _, raw in hinted_lines(text, _ERROR_HINT):
        line = raw[_QUOTE.match(raw).end() :] if raw[:1] in ">E" else raw
        if not line or line[0].isspace():
            continue
        if match := _EXCEPTION.match(line):
            yield f"{match.group(1)}: {match.group(2)}" if match.group(2) else match.group(1)
        elif match := _COMPILER.match(line):
            yield next(g for g in match.groups() if g)
        elif match := _TEST_FAILED.match(line):
            yield match.group(1)
        elif (match := _NPM.match(line)) and not _NPM_TRIVIA.match(match.group(1)) and npm < 3:
            npm += 1
            yield line
        elif "error TS" in line and (match := _TYPESCRIPT.search(line)):
            yield f"{match.group(1)}: {match.group(2)}"


def _commits(text: str) -> Iterator[tuple[str, str | None]]:
    for match in _COMMIT.finditer(text):
        made, subject, shown, aider, aider_subject = match.groups()
        yield (made, subject) if made else (shown, None) if shown else (aider, aider_subject)


def _references(text: str) -> Iterator[tuple[str, str]]:
    """(kind, reference) of the issues and pull requests named in context."""
    if "github.com" in text or "gitlab.com" in text:
        for match in _ISSUE_URL.finditer(text):
            if match.group(1):
                yield ("pr" if match.group(2) == "pull" else "issue"), f"{match.group(1)}#{match.group(3)}"
            else:
                kind = "pr" if match.group(5) == "merge_requests" else "issue"
                yield kind, f"{match.group(4)}{'!' if kind == 'pr' else '#'}{match.group(6)}"
    if "#" not in text:
        return
    for match in _HASH_NUMBER.finditer(text):
        number, at = match.group(1), match.start()
        before = text[max(0, at - 202) : at]
        if repo := _BEFORE_REPO.search(before):
            yield "issue", f"{repo.group(1)}#{number}"
        elif _BEFORE_PR.search(before[-20:]) or (before.endswith("(") and text.startswith(")", match.end())):
            yield "pr", f"#{number}"  # `(#N)`: a squash merge's subject names its pull request
        elif _BEFORE_ISSUE.search(before[-20:]):
            yield "issue", f"#{number}"


def _exit_status(output: str) -> int | None:
    head = output[:2_000]
    if match := _EXIT_HEAD.search(head, 0, 600):
        return int(next(g for g in match.groups() if g is not None))
    if head.lstrip().startswith("{") and (match := _EXIT_JSON.search(output[-400:]) or _EXIT_JSON.search(head)):
        return int(match.group(1))
    return None


# --- tool calls -----------------------------------------------------------------------------------


@dataclass
class _Call:
    """A tool call waiting for its output."""

    tool: str
    command: str | None = None  # a shell command, when the call is one
    files: list[tuple[str, str]] = field(default_factory=list)  # (kind, path)
    needs_file: str | None = None  # SWE-agent's `edit`: the kind of the file its output names


# The tools each harness names in its log (`digest.readers.harness.Harness`), and the shells of
# other agents' logs read as plain turns.
_FILE_TOOLS = {name: shape for harness in HARNESSES for name, shape in harness.file_tools.items()}
_SHELL_TOOLS = frozenset(
    {"bash", "execute_bash", "run_command", "terminal", "run_shell_command"}.union(
        *(harness.shell_tools for harness in HARNESSES)
    )
)
_PATCH_TOOLS = frozenset().union(*(harness.patch_tools for harness in HARNESSES))
_PATCH_FILE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.{1,1000})$|^\*\*\* Move to: (.{1,1000})$", re.M)
# SWE-agent's own commands: its file viewer and editor (the rest of its actions are shell commands).
_SWE_READ = frozenset({"open"})
_SWE_CREATE = frozenset({"create"})
_SWE_EDIT = frozenset({"edit", "insert", "append"})
_SWE_NAVIGATION = frozenset(
    {"goto", "scroll_up", "scroll_down", "search_file", "search_dir", "find_file", "submit", "exit_forfeit",
     "exit_cost", "exit_context", "exit_error", "exit_format", "skip", "filemap"}
)  # fmt: skip
_STR_REPLACE_EDITOR = {
    "view": "file-read", "create": "file-create", "str_replace": "file-edit", "insert": "file-edit",
    "undo_edit": "file-edit",
}  # fmt: skip
_SWE_FILE = re.compile(r"^\[File: (.{1,1000}?) \(\d{1,9} lines total\)\]", re.M)
_BASH_BLOCK = re.compile(r"^```(?:bash|sh)[ \t]*\n(.{0,8000}?)\n```", re.M | re.S)
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/bin/zsh", "/usr/bin/bash"})


def _json_object(text: str) -> dict | None:
    text = text.strip()
    if not text.startswith("{") or len(text) > MAX_ARGS_CHARS:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _command_text(value) -> str | None:
    """A shell command from a call's `command`/`cmd`: a string, or an argv (`bash -lc SCRIPT` is the script)."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) >= 3 and value[0] in _SHELLS and value[1] in ("-lc", "-c", "-l", "-ic"):
            return value[-1].strip() or None
        return shlex.join(value)
    return None


def _patch_files(patch: str) -> list[tuple[str, str]]:
    files = []
    for match in _PATCH_FILE.finditer(patch[:MAX_ARGS_CHARS]):
        action, path, moved = match.groups()
        kind = "file-create" if action == "Add" else "file-edit"
        files.append((kind, (path or moved).strip()))
    return files


def _unquoted(path: str) -> str:
    path = path.strip().strip("'\"`")
    return path[2:] if path.startswith("./") else path


def _call(name: str, args: str) -> _Call | None:
    """What a call's line says; None for a tool that reads, edits, creates and runs nothing we keep."""
    args = args[len("[subagent] ") :] if args.startswith("[subagent] ") else args
    call = _Call(name)
    if name in _FILE_TOOLS:
        kind, key = _FILE_TOOLS[name]
        obj = _json_object(args)
        path = obj.get(key) if obj else None
        if not isinstance(path, str) and (match := re.search(rf'"{key}"\s?:\s?"([^"\\]{{1,1000}})"', args[:4_000])):
            path = match.group(1)
        if isinstance(path, str) and path.strip():
            call.files.append((kind, _unquoted(path)))
        return call
    if name in _PATCH_TOOLS:
        obj = _json_object(args)
        patch = next((obj[k] for k in ("input", "patch") if isinstance(obj.get(k), str)), args) if obj else args
        call.files.extend(_patch_files(patch))
        return call
    first = args.split(None, 1)[0] if args.strip() else ""
    if first == name and not args.lstrip().startswith("{"):
        return _swe_action(call, args.strip())
    if name in _SHELL_TOOLS:
        obj = _json_object(args)
        if obj is not None:
            command = _command_text(obj.get("command", obj.get("cmd")))
            if isinstance(obj.get("command"), list) and obj["command"] and obj["command"][0] in _PATCH_TOOLS:
                call.files.extend(_patch_files(" ".join(obj["command"][1:])))
                return call
        else:  # Codex's local_shell_call, an argv joined by spaces; aider's commands as typed
            command = _command_text(f"git {args}" if name == "git" else args)
            for shell in ("bash -lc ", "bash -c ", "sh -c ", "zsh -lc "):
                if command and command.startswith(shell):
                    command = command[len(shell) :].strip("'\"")
        if command:
            call.command = command[:MAX_VALUE_CHARS]
            call.files.extend(_shell_files(command))
        return call
    return None


def _swe_action(call: _Call, action: str) -> _Call | None:
    """A SWE-agent action: its file viewer and editor's commands, else a shell command."""
    first_line = action.split("\n", 1)[0]
    try:
        words = shlex.split(first_line)
    except ValueError:
        words = first_line.split()
    name = words[0] if words else ""
    if name in _SWE_READ and len(words) > 1:
        call.files.append(("file-read", _unquoted(words[1])))
    elif name in _SWE_CREATE and len(words) > 1:
        call.files.append(("file-create", _unquoted(words[1])))
    elif name in _SWE_EDIT:
        call.needs_file = "file-edit"
    elif name == "str_replace_editor" and len(words) > 2 and words[1] in _STR_REPLACE_EDITOR:
        call.files.append((_STR_REPLACE_EDITOR[words[1]], _unquoted(words[2])))
    elif name in _SWE_NAVIGATION:
        return None
    else:
        call.command = action[:MAX_VALUE_CHARS]
        call.files.extend(_shell_files(action))
    return call


# Shell commands whose file arguments are read, and `sed -i`, which edits them.
_READERS = frozenset({"cat", "head", "tail", "nl", "less", "more", "bat"})
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_WRITES = frozenset({">", ">>", "&>", ">|", "&>>"})
_HEREDOC = re.compile(r"<<-?\s?['\"]?\w")


def _shell_files(script: str) -> list[tuple[str, str]]:
    """The files a shell script's simple commands read (`cat`, `sed -n`, `head`, `tail`, `nl`) or
    edit in place (`sed -i`): a best effort over its first lines, never an error."""
    files = []
    for line in script.splitlines()[:MAX_SCRIPT_LINES]:
        if len(line) > MAX_LINE_CHARS or _HEREDOC.search(line):
            continue
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            continue
        words: list[str] = []
        writes = skip = False
        for token in [*tokens, ";"]:
            if skip:
                skip = False
            elif token in _SEPARATORS:
                files.extend([] if writes else _simple_command_files(words))
                words, writes = [], False
            elif token in _WRITES or token in ("<", ">&", "<&", "<>"):
                # The redirect's target is no argument; `2>file` only moves the errors.
                stderr = token in (">", ">>") and words[-1:] == ["2"]
                writes = writes or (token in _WRITES and not stderr)
                words = (
                    words[:-1] if stderr or (token in (">&", "<&") and words[-1:] and words[-1].isdigit()) else words
                )
                skip = True
            else:
                words.append(token)
    return files


def _simple_command_files(words: list[str]) -> list[tuple[str, str]]:
    while words and (("=" in words[0] and not words[0].startswith("-")) or words[0] in ("sudo", "command", "exec")):
        words = words[1:]
    if not words:
        return []
    program, rest = words[0].rsplit("/", 1)[-1], words[1:]
    if program in _READERS:
        paths, skip = [], False
        for word in rest:
            if skip:
                skip = False
            elif program in ("head", "tail") and word in ("-n", "-c", "--lines", "--bytes"):
                skip = True
            elif not word.startswith("-") and not word.lstrip("+").isdigit():
                paths.append(word)
        return [("file-read", p) for p in paths if _plausible_path(p)]
    if program == "sed":
        in_place = any(w.startswith(("-i", "--in-place")) for w in rest)
        quiet = any(w in ("-n", "--quiet", "--silent") or (w[:1] == "-" and w[1:2] != "-" and "n" in w) for w in rest)
        operands = [w for w in rest if not w.startswith("-")]
        if len(operands) >= 2 and (in_place or quiet) and _plausible_path(operands[-1]):
            return [("file-edit" if in_place else "file-read", operands[-1])]
    return []


def _plausible_path(word: str) -> bool:
    return (
        0 < len(word) <= 1000
        and word not in ("/dev/null", "-")
        and not any(c in word for c in "*?$`{}\n")
        and not word.startswith(("http://", "https://"))
    )


# --- one turn -------------------------------------------------------------------------------------


class _Facts:
    """A turn's facts in the order found, deduplicated (a command by its exit status too), capped."""

    def __init__(self) -> None:
        self.found: dict[tuple, Fact] = {}

    def add(self, kind: str, value: str, detail: str | None = None) -> None:
        value = value.strip()[:MAX_VALUE_CHARS]
        if not value or len(self.found) >= MAX_FACTS:
            return
        detail = detail[:MAX_VALUE_CHARS] if detail else None
        key = (kind, value, detail) if kind == "command" else (kind, value)
        self.found.setdefault(key, Fact(kind, value, detail))

    def scan(self, text: str, tool: str | None) -> None:
        """Errors, commits and references in any text (an output, prose, a prompt)."""
        for error in _errors(text):
            self.add("error", error, tool)
        for commit, subject in _commits(text):
            self.add("commit", commit, subject)
        for kind, reference in _references(text):
            self.add(kind, reference, tool)
        for kind, value, outcome in line_facts(text):  # failures, tracebacks, test tallies
            self.add(kind, value, outcome or tool)


def extract_facts(prompt: str | None, response: str | None, agent: str | None = None) -> list[Fact]:
    """The facts of one stored turn, from its prompt and response text (`agent`: the turn's
    harness, for what only one writes: mini-SWE-agent's commands in bash blocks, aider's `/run`)."""
    facts = _Facts()
    prompt = _capped(prompt or "", PROSE_WINDOW)
    facts.scan(prompt, None)
    if agent == "aider":
        for line in _lines(prompt):
            if line.startswith(("/run ", "/test ", "!")):
                command = line.split(" ", 1)[1] if line.startswith("/") else line[1:]
                if command.strip():
                    facts.add("command", command)
    pending: deque[_Call] = deque()
    for segment in _segments(_capped(response or "", MAX_TEXT_CHARS)):
        if segment.label == "tool":
            call = _call(segment.name or "", segment.text)
            if call is not None:
                _call_facts(facts, call)
                pending.append(call)
            else:
                pending.append(_Call(segment.name or ""))
            facts.scan(_capped(segment.text, OUTPUT_WINDOW), segment.name)  # a URL in the arguments
            for kind, number in _gh_references(call.command if call and call.command else ""):
                facts.add(kind, number, segment.name)  # `gh pr view 12`
        elif segment.label in _OUTPUT_LABELS:
            call = pending.popleft() if pending else None
            _output_facts(facts, call, segment.text)
        else:  # prose (the agent's text, aider's own lines), a system notice
            text = _capped(segment.text, PROSE_WINDOW)
            _text_call_facts(facts, _capped(segment.text, TEXT_WINDOW))  # first: their tools' names stay
            facts.scan(text, None)
            _aider_files(facts, text)
            if agent == "mini-swe-agent":
                for block in _BASH_BLOCK.finditer(text):
                    call = _Call("bash", command=block.group(1).strip()[:MAX_VALUE_CHARS])
                    call.files.extend(_shell_files(block.group(1)))
                    _call_facts(facts, call)
                    pending.append(call)
    for call in pending:  # calls with no output in the log
        _output_facts(facts, call, "")
    return list(facts.found.values())


def _text_call_facts(facts: _Facts, prose: str) -> None:
    """The tool calls prose holds as text (`digest.text_facts`); a command already found with a
    status is not added again without one."""
    for call in text_calls(prose):
        for kind, path in [*call.files, *(_shell_files(call.command) if call.command else [])]:
            facts.add(kind, _unquoted(path), call.tool)
        status = None if call.status is None else f"exit {call.status}"
        known = call.command and any(k[:2] == ("command", call.command.strip()[:MAX_VALUE_CHARS]) for k in facts.found)
        if call.command and (status or not known):
            facts.add("command", call.command, status)
        facts.scan(_capped(call.output, OUTPUT_WINDOW), call.tool)


def _gh_references(text: str) -> Iterator[tuple[str, str]]:
    for match in _GH_COMMAND.finditer(text[:OUTPUT_WINDOW]):
        yield match.group(1), f"#{match.group(2)}"


def _call_facts(facts: _Facts, call: _Call) -> None:
    """A call's files, at once (but a Write's: its output says whether it created the file)."""
    if call.tool != "Write":
        for kind, path in call.files:
            facts.add(kind, path, call.tool)


_OVERWRITTEN = re.compile(r"has been (?:updated|overwritten)")


def _output_facts(facts: _Facts, call: _Call | None, output: str) -> None:
    window = _capped(output, OUTPUT_WINDOW)
    codex_json = _codex_output(output)
    if codex_json is not None:
        window = _capped(codex_json, OUTPUT_WINDOW)
    tool = call.tool if call else None
    if call is not None:
        if call.tool == "Write":
            for kind, path in call.files:
                facts.add("file-edit" if _OVERWRITTEN.search(output[:500]) else kind, path, call.tool)
        if call.needs_file and (match := _SWE_FILE.search(output[:2_000])):
            facts.add(call.needs_file, _unquoted(match.group(1)), call.tool)
        if call.command is not None:
            status = _exit_status(output)
            facts.add("command", call.command, None if status is None else f"exit {status}")
    facts.scan(window, tool)
    _aider_files(facts, window)


def _codex_output(output: str) -> str | None:
    """The text of an older Codex output written as JSON (`{"output": …, "metadata": {…}}`)."""
    if not output.startswith('{"output"'):
        return None
    obj = _json_object(output)
    text = obj.get("output") if obj else None
    return text if isinstance(text, str) else None


def _aider_files(facts: _Facts, text: str) -> None:
    if "Applied edit to" not in text and "Creating empty file" not in text and "to the chat" not in text:
        return
    for raw in _lines(text):
        line = raw[2:] if raw.startswith("> ") else raw
        if match := _AIDER_FILE.match(line):
            verb, path = match.groups()
            if verb == "Added" and not line.endswith(("to the chat", "to the chat.")):
                continue
            kind = {"Applied edit to": "file-edit", "Creating empty file": "file-create"}.get(verb, "file-read")
            facts.add(kind, _unquoted(path), "aider")


def turn_fact_rows(rows: Iterable[dict]) -> list[dict]:
    """`turn_facts` rows of stored turns (each a `turns` row: `id`, `session_id`, `prompt`,
    `response`, `agent`); a turn whose text defeats the extraction keeps no facts, never fails a write."""
    out = []
    for row in rows:
        try:
            found = extract_facts(row.get("prompt"), row.get("response"), row.get("agent"))
        except Exception:  # whatever the text holds: this turn has no facts
            found = []
        out.extend(
            {
                "turn_id": row["id"],
                "session_id": row["session_id"],
                "kind": f.kind,
                "value": f.value,
                "detail": f.detail,
            }
            for f in found
        )
    return out


# --- shown on the session's partition -------------------------------------------------------------


def facts_markdown(facts: Iterable[tuple[str, str, str | None]], top: int = 10) -> str:
    """A session's facts, in turn order, as a short Markdown list: the files edited or created, the
    commands with their exit status, the errors, the test tallies (the first `top` of each, each
    once; a command's last status stands), then the counts of what else there is."""
    by_kind: dict[str, dict[str, str | None]] = {kind: {} for kind in KINDS}
    for kind, value, detail in facts:
        if kind in by_kind:
            by_kind[kind].pop(value, None)
            by_kind[kind][value] = detail
    sections = []
    files = {**{v: "created" for v in by_kind["file-create"]}, **{v: "edited" for v in by_kind["file-edit"]}}
    for title, items in (
        ("Files edited or created", [f"`{_code(v)}` ({how})" for v, how in files.items()]),
        ("Commands", [f"`{_code(v)}`" + (f" → {d}" if d else "") for v, d in by_kind["command"].items()]),
        ("Errors", [f"`{_code(v)}`" for v in by_kind["error"]]),
        ("Tests", list(by_kind["test"])),
    ):
        if items:
            more = f"\n- … and {len(items) - top} more" if len(items) > top else ""
            sections.append(f"**{title}** ({len(items)})\n\n" + "\n".join(f"- {i}" for i in items[:top]) + more)
    others = [
        f"{len(by_kind[k])} {label}"
        for k, label in (("file-read", "files read"), ("commit", "commits"), ("issue", "issues"), ("pr", "PRs"))
        if by_kind[k]
    ]
    if others:
        sections.append("Also: " + ", ".join(others) + ".")
    return "\n\n".join(sections) or "No files, commands or errors found in the turns' tool calls."


def _code(value: str, limit: int = 120) -> str:
    line = value.splitlines()[0] if value else ""
    line = line if len(line) <= limit and "\n" not in value else line[:limit] + " …"
    return line.replace("`", "'")
