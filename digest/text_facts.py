"""Facts read from a turn's prose, with no model call: the tool calls of logs that hold them only as
text (Claude Code's `/export`, SpecStory's Markdown histories, shell transcripts in console blocks),
the failures of models and tools (a commit gpg could not sign, an aider edit that did not match, a
token limit, a credit balance, a rate limit, a missing model, a context window), Python tracebacks
and the tallies of test runners. `digest.facts` calls these for every harness; this module knows
nothing of it and returns plain values (`TextCall`, `(kind, value, detail)` tuples).

Precision comes before recall (a fact shown on a session card must be true):
- only the agent's text is read for calls: never a turn's prompt, nor a SpecStory `_**User**_` part;
- a ```` ```bash ```` block is code shown, not a command run, unless its output follows it (an
  output block right after it, as SpecStory writes a run), or it is a SpecStory terminal tool use
  with an output; a console block (```` ```console ````, or `$ ` lines in a shell block) is a run
  when it holds output; a `$ cmd` line outside a block is one when output lines follow it and its
  program is a known one (`$ 5`, or `$ x $` in math, is none); `> ` lines are never commands
  (Markdown quotes, aider's own lines, Claude Code's prompts);
- an exit status is read only from the output of a command found so (its first line, or its last
  three), never from prose that mentions `exit 1`;
- a file is edited or created only where the log says so (`⏺ Update(F)`, `⏺ Write(F)`, SpecStory's
  `Edit file: F`), and not when the tool's result starts with `Error` or says it was interrupted.

The work is bounded: the caller caps the text, lines are read to `MAX_LINE_CHARS`, a call's output
to `OUTPUT_LINES` lines, the patterns are anchored with bounded repeats.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_LINE_CHARS = 1_000
TEXT_WINDOW = 400_000  # of one prose segment read for its calls, head and tail
OUTPUT_LINES = 400  # of one call's output
MAX_CALL_LINES = 50  # of one call's arguments or one block's command
MAX_ERROR_CHARS = 240  # of a failure's value: the line as logged, or from the message on
MAX_TRACEBACKS = 20
TRACEBACK_LINES = 300  # read after a traceback's head for its exception line


def capped(text: str, limit: int) -> str:
    """The text, or its head and tail halves when longer than `limit`, each cut at a line's end
    where it has one (a cut line would read as another: `fatal: not a`)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    head, tail = text[:half], text[-half:]
    cut, start = head.rfind("\n"), tail.find("\n")
    return (head[:cut] if cut > 0 else head) + "\n" + (tail[start + 1 :] if start >= 0 else tail)


def hinted_lines(text: str, hint: re.Pattern) -> Iterator[tuple[int, str]]:
    """(offset, line) of the lines of `text` that hold a match of `hint`, each once, to `MAX_LINE_CHARS`."""
    end = -1
    for match in hint.finditer(text):
        if match.start() <= end:
            continue
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        yield start, text[start : min(end, start + MAX_LINE_CHARS)].rstrip()


@dataclass
class TextCall:
    """A tool call read from text: its command or files, its exit status where the text gives it,
    and its output (dedented), for the caller to scan for errors, commits and tallies."""

    tool: str
    command: str | None = None
    files: list[tuple[str, str]] = field(default_factory=list)  # (kind, path as written)
    status: int | None = None
    output: str = ""


# --- the text's parts -----------------------------------------------------------------------------

_SPEAKER = re.compile(r"^_\*\*(?:(User|Assistant|Agent)\b[^*\n]{0,200})?\*\*_$")  # SpecStory; `_****_`
_SPEAKERS = re.compile(_SPEAKER.pattern, re.M)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}) ?([\w+.-]{0,30})")
_SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh"})
_CONSOLE_LANGS = frozenset({"console", "shell-session", "sh-session", "shellsession", "terminal"})
_OUTPUT_LANGS = frozenset({"", "text", "txt", "output", "log", "stdout", "plaintext", "console"})
# A shell prompt: `$ `, `bash-$ `, `user@host:dir$ `, PowerShell's `PS C:\dir> `.
_PROMPT = re.compile(r"^(\$|bash-\$|[\w.-]{1,64}@[\w.-]{1,64}:[^\s$#]{0,200}[$#]|PS [A-Za-z]:\\[^>\n]{0,200}>) (\S.*)$")
_COMMAND_WORD = re.compile(r"^[A-Za-z_./~][\w.+:/@~-]{0,100}(?:\s|$)")
# A bare `$ cmd` in prose needs a program we know (prose and math start lines with `$ ` too).
_PROGRAMS = frozenset(
    "git npm npx yarn pnpm bun node deno python python3 py pip pip3 uv poetry pytest tox ruff mypy make cmake "
    "cargo rustc go gcc clang javac java mvn gradle dotnet ruby bundle rake gem php composer docker kubectl "
    "helm terraform ls cd cat head tail grep rg find sed awk echo mkdir rm mv cp touch chmod curl wget ssh "
    "tar gh jest vitest tsc eslint prettier swift xcodebuild flutter dart mix elixir ./gradlew ./mvnw".split()
)  # fmt: skip
_CLAUDE_CALL = re.compile(r"^ {0,4}[⏺●] (Bash|Update|Write|Read|Edit|MultiEdit|NotebookEdit|Create)\((.*)$")
_CALL_END = re.compile(r"\)(?:…| timeout: [\w.]{1,20})?$")  # `Bash(cmd) timeout: 30s`
_CLAUDE_RESULT = re.compile(r"^ {0,4}⎿\s{0,3}(.*)$")
_CLAUDE_ARG = re.compile(r'^(?:command|file_path|path|notebook_path) ?[:=] ?"(.*)"$')
_CLAUDE_FILES = {"Update": "file-edit", "Edit": "file-edit", "MultiEdit": "file-edit", "NotebookEdit": "file-edit",
                 "Write": "file-create", "Create": "file-create", "Read": "file-read"}  # fmt: skip
_NO_EFFECT = re.compile(r"^(?:Error|Interrupted|User rejected|No changes|Cancelled)")
_TOOL_USE_TAG = re.compile(r'^<tool-use\b[^>\n]{0,400}?data-tool-name="([^"\n]{1,80})"')
_TOOL_TYPE = re.compile(r'data-tool-type="([\w-]{1,40})"')
_TOOL_USE_LINE = re.compile(r"^(?:<details>\s{0,4})?(?:<summary>)?Tool use: \*\*([\w.:-]{1,80})\*\*")
_SUMMARY = re.compile(r"(Run command|Edit file|Read file): (.{1,1000}?)(?:</summary>)?$")
_RETURNCODE = re.compile(r"^<returncode>(-?\d{1,5})</returncode>$")  # mini-SWE-agent's observation
_HTML_ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#39|#96);")
_SPECSTORY_SHELL = frozenset({"run_terminal_cmd", "Bash", "bash", "command", "shell", "run_command", "terminal"})
_SPECSTORY_EDIT = frozenset({"edit_file", "search_replace", "code_edit", "Edit", "MultiEdit", "Write", "write",
                             "str_replace", "apply_patch", "edit_notebook", "reapply"})  # fmt: skip
_SPECSTORY_READ = frozenset({"read_file", "Read"})
_CLAUDE_UPDATED = re.compile(r"The file (.{1,1000}?) has been (?:updated|overwritten)")
_CLAUDE_CREATED = re.compile(r"File created successfully at: (.{1,1000})$")
_CREATED_HUNK = re.compile(r"^@@ -(0,0|1,1) \+1")
_READ_FILE_LINE = re.compile(r"^Read file: (\S.{0,1000})$")


def _is_close(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip(fence[0])


def _fence_end(lines: list[str], start: int, fence: str) -> int:
    """The index of the line that closes the block opened at `start` (or the text's end)."""
    for j in range(start + 1, len(lines)):
        if _is_close(lines[j], fence):
            return j
    return len(lines)


def text_calls(text: str) -> Iterator[TextCall]:
    """The tool calls an agent's text holds as text (the module's docstring says which)."""
    lines = [line[:MAX_LINE_CHARS].rstrip() for line in text.splitlines()]
    specstory = "Tool use: **" in text or "<tool-use" in text or bool("_**" in text and _SPEAKERS.search(text))
    user, i = False, 0
    while i < len(lines):
        line = lines[i]
        if fence := _FENCE.match(line):
            end = _fence_end(lines, i, fence.group(1))
            if user:
                i = end + 1
                continue
            calls, i = _block(lines, i, end, fence.group(2).lower())
            yield from calls
        elif speaker := _SPEAKER.match(line):
            specstory, user = True, speaker.group(1) == "User"
            i += 1
        elif user:
            i += 1
        elif "<think>" in line and "</think>" not in line:
            i = next((j for j in range(i + 1, len(lines)) if "</think>" in lines[j]), len(lines) - 1) + 1
        elif claude := _CLAUDE_CALL.match(line):
            call, i = _claude_call(lines, i, claude.group(1), claude.group(2))
            if call is not None:
                yield call
        elif (tag := _TOOL_USE_TAG.match(line)) or _TOOL_USE_LINE.match(line):
            call, i = _specstory_call(lines, i, tag)
            if call is not None:
                yield call
        elif specstory and (read := _READ_FILE_LINE.match(line)) and _path_ok(read.group(1)):
            yield TextCall("read_file", files=[("file-read", read.group(1).strip())])
            i += 1
        elif prompt := _PROMPT.match(line):
            call, i = _prompt_line(lines, i, prompt.group(1), prompt.group(2))
            if call is not None:
                yield call
        else:
            i += 1


# --- Claude Code's /export ------------------------------------------------------------------------


def _claude_call(lines: list[str], i: int, tool: str, first: str) -> tuple[TextCall | None, int]:
    """`⏺ Bash(npm test)` and its `  ⎿  output` lines (a long call goes on in lines indented six)."""
    parts, j = [first], i + 1
    while not _CALL_END.search(parts[-1]) and j < len(lines) and len(parts) < MAX_CALL_LINES:
        if not lines[j].startswith("      "):
            return None, i + 1  # an unclosed call: not read
        parts.append(lines[j].strip())
        j += 1
    if not (end := _CALL_END.search(parts[-1])):
        return None, j
    arg = "\n".join(parts)
    arg = arg[: len(arg) - (len(parts[-1]) - end.start())]
    if quoted := _CLAUDE_ARG.match(arg):
        arg = quoted.group(1)
    output, j = _claude_output(lines, j)
    first_out = output[0] if output else ""
    call = TextCall(tool)
    if tool == "Bash":
        if status := re.match(r"^Error: Exit code (-?\d{1,5})$", first_out):
            call.status, output = int(status.group(1)), output[1:]
        call.command = arg.strip() or None
    elif not _NO_EFFECT.match(first_out) and _path_ok(arg) and "\n" not in arg:
        kind = _CLAUDE_FILES[tool]
        call.files.append(("file-edit" if kind == "file-create" and first_out.startswith("Updated") else kind, arg))
    call.output = "\n".join(output)
    return (call if call.command or call.files or call.output else None), j


def _claude_output(lines: list[str], j: int) -> tuple[list[str], int]:
    """The result lines after a call: `  ⎿  ` and the lines indented under it, dedented."""
    output: list[str] = []
    while j < len(lines) and len(output) < OUTPUT_LINES:
        line = lines[j]
        if result := _CLAUDE_RESULT.match(line):
            output.append(result.group(1))
        elif output and line.startswith("    "):
            output.append(line[5:] if line[:5].isspace() else line.lstrip())
        elif output and not line and j + 1 < len(lines) and lines[j + 1].startswith("     "):
            output.append("")
        else:
            break
        j += 1
    return output, j


# --- SpecStory ------------------------------------------------------------------------------------


def _specstory_call(lines: list[str], i: int, tag: re.Match | None) -> tuple[TextCall | None, int]:
    """A tool use: `<tool-use data-tool-name="N">` … `</tool-use>`, or a bare `Tool use: **N**`
    line and what follows it to the next `---`, header or tool use."""
    name = tag.group(1) if tag else _TOOL_USE_LINE.match(lines[i]).group(1)
    kind = (tool_type := _TOOL_TYPE.search(lines[i])) and tool_type.group(1)
    j, region = i + 1, [lines[i]]
    while j < len(lines) and len(region) < 2_000:
        line = lines[j]
        if _SPEAKER.match(line) or line.startswith("<tool-use") or (not tag and _TOOL_USE_LINE.match(line)):
            break
        j += 1
        if tag and "</tool-use>" in line:
            break
        if not tag and line == "---":
            break
        region.append(line)
    return _specstory_facts(name, kind, region), j


def _specstory_facts(name: str, kind: str | None, region: list[str]) -> TextCall | None:
    summary = next((m for line in region[:6] if (m := _SUMMARY.search(line))), None)
    call = TextCall(name)
    if name in _SPECSTORY_SHELL or kind == "shell":
        blocks = _blocks(region)
        command = next(((n, text) for n, (lang, text) in enumerate(blocks) if lang in _SHELL_LANGS), None)
        if command is None:
            inline = next(
                (line.strip()[1:-1] for line in region[1:8] if re.match(r"^`[^`]{1,1000}`$", line.strip())), None
            )
            command = (-1, inline or (summary.group(2) if summary and summary.group(1) == "Run command" else None))
        outputs = [text for lang, text in blocks[command[0] + 1 :] if lang in _OUTPUT_LANGS]
        if not command[1] or not outputs:
            return None  # a command shown with no output was proposed, maybe skipped: no run
        call.command = _unescaped(command[1].strip())
        call.output = outputs[0]
        call.status = exit_status(outputs[0].splitlines(), call.command)
        return call
    text = "\n".join(region)
    if name in _SPECSTORY_EDIT or kind == "write":
        if "made no changes" in text or "\nCancelled" in text:
            return None
        if summary and summary.group(1) == "Edit file":
            created = _created(region)
            call.files.append(("file-create" if created else "file-edit", _unescaped(summary.group(2).strip())))
        elif match := _CLAUDE_UPDATED.search(text):
            call.files.append(("file-edit", match.group(1)))
        elif match := next((m for line in region if (m := _CLAUDE_CREATED.search(line))), None):
            call.files.append(("file-create", match.group(1).strip()))
    elif name in _SPECSTORY_READ or kind == "read":
        if summary and summary.group(1) == "Read file":
            call.files.append(("file-read", _unescaped(summary.group(2).strip())))
        elif inline := next(
            (line.strip() for line in region[1:8] if re.match(r"^`[^`\s]{1,1000}`$", line.strip())), None
        ):
            call.files.append(("file-read", inline[1:-1]))
        elif match := next((m for line in region[1:8] if (m := _READ_FILE_LINE.match(line))), None):
            call.files.append(("file-read", match.group(1).strip()))
    call.files = [(k, p) for k, p in call.files if _path_ok(p)]
    return call if call.files else None


def _created(region: list[str]) -> bool:
    """Whether an edit's diff writes a new file: its hunk starts at `-0,0`, or (Cursor's) replaces
    the one empty line of an empty file (`@@ -1,1 +1,N @@` then `- `)."""
    n = next((n for n, line in enumerate(region) if line.startswith("@@ ")), None)
    hunk = _CREATED_HUNK.match(region[n]) if n is not None else None
    return bool(hunk) and (hunk.group(1) == "0,0" or (n + 1 < len(region) and region[n + 1].strip() == "-"))


def _blocks(region: list[str]) -> list[tuple[str, str]]:
    """(language, text) of the fenced blocks in a region."""
    blocks, j = [], 0
    while j < len(region):
        if fence := _FENCE.match(region[j]):
            end = _fence_end(region, j, fence.group(1))
            blocks.append((fence.group(2).lower(), "\n".join(region[j + 1 : end][:OUTPUT_LINES])))
            j = end
        j += 1
    return blocks


def _unescaped(text: str) -> str:
    return html.unescape(text) if _HTML_ENTITY.search(text) else text


# --- fenced blocks and prompt lines ---------------------------------------------------------------


def _block(lines: list[str], i: int, end: int, lang: str) -> tuple[list[TextCall], int]:
    """The runs a fenced block shows: a console transcript's commands with their output, or a shell
    block's script when an output block (or mini-SWE-agent's `<returncode>`) follows it; code shown
    is none."""
    body = lines[i + 1 : end]
    first = next((line for line in body if line.strip()), "")
    if lang in _CONSOLE_LANGS or (lang in _SHELL_LANGS and _PROMPT.match(first)):
        return _transcript(body), end + 1
    if lang in _SHELL_LANGS and 0 < len(body) <= MAX_CALL_LINES:
        k = end + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        after = _FENCE.match(lines[k]) if k < len(lines) else None
        if k < len(lines) and (code := _RETURNCODE.match(lines[k])) and "\n".join(body).strip():
            out_end = next((n for n in range(k + 1, min(len(lines), k + OUTPUT_LINES)) if lines[n] == "</output>"), k)
            output = [line for line in lines[k + 1 : out_end] if line != "<output>"]
            call = TextCall("shell", command="\n".join(body).strip(), output="\n".join(output))
            call.status = int(code.group(1))
            return [call], out_end + 1
        if (
            after
            and after.group(2).lower() in _OUTPUT_LANGS
            and not (after.group(2) == "console" and _has_prompt(lines, k))
        ):
            out_end = _fence_end(lines, k, after.group(1))
            output = lines[k + 1 : out_end][:OUTPUT_LINES]
            command = "\n".join(body).strip()
            if command:
                call = TextCall("shell", command=command, output="\n".join(output))
                call.status = exit_status(output, command)
                return [call], out_end + 1
    return [], end + 1


def _has_prompt(lines: list[str], k: int) -> bool:
    return any(_PROMPT.match(line) for line in lines[k + 1 : k + 4])


def _transcript(body: list[str]) -> list[TextCall]:
    """`$ cmd` lines and their output; none when no command has output (a list of commands to run)."""
    calls: list[TextCall] = []
    outputs: list[list[str]] = []
    for line in body:
        prompt = _PROMPT.match(line)
        if prompt and _COMMAND_WORD.match(prompt.group(2)):
            calls.append(TextCall("shell", command=prompt.group(2).strip()))
            outputs.append([])
        elif outputs and len(outputs[-1]) < OUTPUT_LINES:
            outputs[-1].append(line)
    if not any(any(o.strip() for o in out) for out in outputs):
        return []
    for call, out in zip(calls, outputs):
        call.output, call.status = "\n".join(out), exit_status(out, call.command)
    return calls


def _prompt_line(lines: list[str], i: int, prompt: str, command: str) -> tuple[TextCall | None, int]:
    """A `$ cmd` line in prose, when output lines follow it (else it is a command to run, shown)."""
    j, output = i + 1, []
    while j < len(lines) and lines[j].strip() and len(output) < OUTPUT_LINES:
        if _PROMPT.match(lines[j]) or _FENCE.match(lines[j]) or _SPEAKER.match(lines[j]):
            break
        output.append(lines[j])
        j += 1
    word = command.split(None, 1)[0]
    known = prompt != "$" or word in _PROGRAMS or word.startswith(("./", "/"))
    if not output or not known or not _COMMAND_WORD.match(command) or command.rstrip().endswith("$"):
        return None, max(j, i + 1)
    return TextCall("shell", command=command.strip(), output="\n".join(output), status=exit_status(output, command)), j


def _path_ok(path: str) -> bool:
    path = path.strip()
    return (
        0 < len(path) <= 1000
        and path not in ("undefined", "null", "None")
        and "…" not in path
        and not any(c in path for c in "*?\n`<>")
        and "(ctrl+" not in path
    )


# --- exit statuses --------------------------------------------------------------------------------

_STATUS = re.compile(
    r"^[\[(]?(?:Exit code|exit code|Exit status|exit status|(?:Process |Command |The command )?exited with code"
    r"|(?:error )?Command failed with exit code|exit)[: ]{1,2}(-?\d{1,5})\b\.?[\])]?$"
)
_CALLED_PROCESS = re.compile(r"Command '(.{1,500})' returned non-zero exit status (\d{1,5})\.?$")


def exit_status(output: list[str], command: str | None) -> int | None:
    """A command's exit status where its output's first line or last three lines give it: `Exit
    code: N`, `Process exited with code N`, `exit status N`, `Command failed with exit code N`,
    `(exit N)`; `Command 'C' returned non-zero exit status N` only when C is the command itself
    (else it is a command the command ran)."""
    tail = [line.strip() for line in output[-12:] if line.strip()][-3:]
    head = [output[0].strip()] if output else []
    for line in [*reversed(tail), *head]:
        if match := _STATUS.match(line):
            return int(match.group(1))
        if (match := _CALLED_PROCESS.search(line)) and command and match.group(1).strip() == command.strip():
            return int(match.group(2))
    return None


# --- failures, tracebacks and test tallies in any text --------------------------------------------

# What a failure's or a tally's line holds, lowercased: only the lines with one are read (found by
# `str.find`, much faster than one pattern of many alternatives).
_LINE_WORDS = (
    "fail", "pass", "limit", "429", "not found", "context length", "context_length", "prompt is too long",
    "credit balance", "searchreplace", "conform to the edit format", "fatal: ", "unable to commit", "ran ", "\nok ",
)  # fmt: skip
MAX_WORD_LINES = 2_000  # of one text, read for failures and tallies
_QUOTED = re.compile(r"^(?:> ?|⎿\s{0,3}|E {2,12}){0,3}")
_ANSI = re.compile(r"\x1b\[[0-9;]{0,20}m")
# Failures written on a line of their own (aider's, git's).
_FAILURE_LINE = re.compile(
    r"^(?:(?:error: )?gpg failed to sign the data|fatal: \S.{0,1000}|Unable to commit: \S.{0,300}"
    r"|#{0,2} ?\d{1,4} SEARCH/REPLACE blocks? failed to match!?|(?:#{1,3} )?SearchReplaceNoExactMatch: .{1,300}"
    r"|(?:The LLM )?did not conform to the edit format\.?|Failed to apply edit to \S.{0,300}"
    r"|(?:The )?edit block failed to match.{0,200}|Model \S{1,200} has hit a token limit!"
    r"|(?:Your )?[Cc]redit balance is too low.{0,300}|Claude AI usage limit reached.{0,200}"
    r"|This model's maximum context length is \d{1,9} tokens.{0,300}"
    r"|You'?ve hit your (?:\w{1,20} ){0,2}limit.{0,200})$"
)
# Failures that a line holds after an error's prefix, or in an API's JSON error.
_ERROR_PREFIX = (
    r"(?:[\w.]{0,60}(?:Error|Exception)|API Error|error|npm ERR!|npm error|HTTP(?:/[\d.]{1,3})?)(?::|(?= \d{3}\b))"
)
# Failures in an error's line (`litellm.RateLimitError: …`, `Error: model 'x' not found`, `API Error: 400
# {…}`) or a JSON error line: a line of code or prose that names `rate_limit_error` is none.
_ERROR_START = re.compile(r"^(?:\{|[\w.]{0,60}(?:Error|Exception)\b|API Error|[Ee]rror:|npm ERR!|npm error|HTTP)")
_FAILURE_IN_LINE = re.compile(
    r"\"Your credit balance is too low|Rate limit reached for \S{1,100} in organization"
    r"|rate_limit_error|\bmodel [\"'\\]{1,2}[^\"'\s\\]{1,100}[\"'\\]{1,2} not found"
    r"|maximum context length is \d{1,9} tokens|context_length_exceeded|prompt is too long: \d{1,9} tokens"
)
_FAILURE_AFTER_PREFIX = re.compile(
    rf"^{_ERROR_PREFIX}.{{0,80}}?(?:\b429\b|[Rr]ate.?[Ll]imit|RateLimit|Too Many Requests|[Cc]ontext length exceeded|credit balance is too low)"
)
_TRACEBACK = re.compile(r"^([ \t>]{0,40})Traceback \(most recent call last\):", re.M)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]{0,200})(?:: ?(.*))?$")
_EXCEPTION_ENDS = ("Error", "Exception", "Exit", "Interrupt", "Warning")
_TALLY_PART = re.compile(
    r"(\d{1,7}) (failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun|todo|pending)"
)
_PYTEST = re.compile(r"^=+ ([^=\n]{1,200}) in \d{1,6}(?:\.\d{1,4})?s(?: \([^)\n]{1,20}\))? =+$")
_PYTEST_QUIET = re.compile(
    r"^(\d{1,7} (?:failed|passed|errors?)[^=\n]{0,200}) in \d{1,6}(?:\.\d{1,4})?s(?: \([^)\n]{1,20}\))?$"
)
_JEST = re.compile(r"^Tests:\s{1,20}([^\n]{1,200}), \d{1,7} total$")
_VITEST = re.compile(r"^Tests\s{1,20}([^()\n]{1,200}) \(\d{1,7}\)$")
_CARGO = re.compile(r"^test result: (?:ok|FAILED)\. (\d{1,7}) passed; (\d{1,7}) failed;")
_GO = re.compile(
    r"^(ok|FAIL)\s{1,10}[\w.@/-]{1,300}\s{1,10}(?:\d{1,6}(?:\.\d{1,4})?s|\(cached\)|\[(?:build|setup) failed\])"
)
_MOCHA = re.compile(r"^(\d{1,7}) passing \(\d{1,6}(?:ms|s|m)\)$")
_MOCHA_FAILING = re.compile(r"^(\d{1,7}) failing$")
_UNITTEST = re.compile(r"^Ran (\d{1,7}) tests? in \d{1,6}(?:\.\d{1,4})?s$")
_UNITTEST_END = re.compile(r"^(OK|FAILED)(?: \(([^)\n]{1,100})\))?$")


def line_facts(text: str) -> Iterator[tuple[str, str, str | None]]:
    """(kind, value, detail) of the failures (`error`, no detail), traceback exceptions (`error`) and
    test tallies (`test`, detail `failed` or `passed`) a text holds."""
    go = [0, 0]
    for start, raw in _word_lines(text):
        line = (_ANSI.sub("", raw) if "\x1b" in raw else raw).strip()
        line = line[_QUOTED.match(line).end() :].strip() if line[:1] in ">⎿E" else line
        line = line[9:] if line.startswith(("stderr: '", "stdout: '")) else line  # GitPython's, in aider's lines
        if failure := _failure(line):
            yield "error", failure, None
        elif line[:1] in _TALLY_STARTS and (tally := _tally(line, text, start)):
            yield "test", *tally
        elif line[:2] in ("ok", "FA") and (match := _GO.match(line)):
            go[match.group(1) == "ok"] += 1
    if go != [0, 0]:
        yield "test", _tally_value(go[0], 0, go[1]) + " (packages)", "failed" if go[0] else "passed"
    if "Traceback (most recent call last):" in text:
        yield from (("error", exception, None) for exception in traceback_exceptions(text))


def _word_lines(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line) of the lines of `text` that hold one of `_LINE_WORDS`, in order, each once."""
    lowered = text.lower()
    lowered = lowered if len(lowered) == len(text) else text  # a letter whose lower case is longer
    starts = {0} if lowered.startswith("ok ") else set()
    for word in _LINE_WORDS:
        at = lowered.find(word)
        while at >= 0 and len(starts) < MAX_WORD_LINES:
            starts.add(lowered.rfind("\n", 0, at + (word[0] == "\n")) + 1)
            end = lowered.find("\n", at + len(word))
            at = lowered.find(word, end) if end >= 0 else -1
    for start in sorted(starts):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield start, text[start : min(end, start + MAX_LINE_CHARS)].rstrip()


_FAILURE_WORDS = (
    "gpg", "fatal: ", "unable to commit", "search", "conform", "edit", "limit", "credit balance", "context length",
)  # fmt: skip
_FAILURE_AFTER_WORDS = ("429", "rate", "too many requests", "context length")
_FAILURE_IN_WORDS = ('"your credit', "rate limit reached", "rate_limit_error", "not found", "context", "too long")
_TALLY_STARTS = frozenset("=0123456789TtR")


def _failure(line: str) -> str | None:
    low = line.lower()
    if (any(w in low for w in _FAILURE_WORDS) and _FAILURE_LINE.match(line)) or (
        any(w in low for w in _FAILURE_AFTER_WORDS) and _FAILURE_AFTER_PREFIX.match(line)
    ):
        value = line[:MAX_ERROR_CHARS].rstrip()
        return value[:-1] if value.endswith("'") and value.count("'") % 2 else value  # a quoted stderr's end
    in_words = any(w in low for w in _FAILURE_IN_WORDS)
    if in_words and _ERROR_START.match(line) and (match := _FAILURE_IN_LINE.search(line)):
        if len(line) <= MAX_ERROR_CHARS:
            return line
        message = line[match.start() : match.start() + MAX_ERROR_CHARS].lstrip('"')
        return message.split('"', 1)[0].rstrip(" ,\\")
    return None


def _tally(line: str, text: str, start: int) -> tuple[str, str] | None:
    if match := _PYTEST.match(line) or _PYTEST_QUIET.match(line) or _JEST.match(line):
        return _parts(match.group(1), ", ")
    if match := _VITEST.match(line):
        return _parts(match.group(1), " | ")
    if match := _CARGO.match(line):
        return _counts(int(match.group(2)), 0, int(match.group(1)))
    if not line[:1].isdigit() and not line.startswith("Ran "):
        return None
    following = [_ANSI.sub("", n).strip() for n in text[start : start + 600].splitlines()[1:6] if n.strip()]
    if match := _MOCHA.match(line):
        failing = next((int(m.group(1)) for n in following[:3] if (m := _MOCHA_FAILING.match(n))), 0)
        return _counts(failing, 0, int(match.group(1)))
    if (match := _UNITTEST.match(line)) and following and (end := _UNITTEST_END.match(following[0])):
        counts = dict((k.strip(), int(v)) for k, v in re.findall(r"([a-z ]{1,30})=(\d{1,7})", end.group(2) or ""))
        failed, errors = counts.get("failures", 0), counts.get("errors", 0)
        others = counts.get("skipped", 0) + counts.get("expected failures", 0) + counts.get("unexpected successes", 0)
        return _counts(failed, errors, max(0, int(match.group(1)) - failed - errors - others))
    return None


def _parts(text: str, separator: str) -> tuple[str, str] | None:
    """A runner's `N word` parts (every one of them a tally part) → the normalized tally."""
    parts = text.split(separator)
    found = [_TALLY_PART.fullmatch(p.strip()) for p in parts]
    if not all(found):
        return None
    counts: dict[str, int] = {}
    for match in found:
        word = "error" if match.group(2).startswith("error") else match.group(2)
        counts[word] = counts.get(word, 0) + int(match.group(1))
    return _counts(counts.get("failed", 0), counts.get("error", 0), counts.get("passed", 0))


def _counts(failed: int, errors: int, passed: int) -> tuple[str, str] | None:
    if not failed + errors + passed:
        return None
    return _tally_value(failed, errors, passed), "failed" if failed or errors else "passed"


def _tally_value(failed: int, errors: int, passed: int) -> str:
    parts = [f"{failed} failed" if failed else "", f"{errors} error{'s' if errors > 1 else ''}" if errors else ""]
    return ", ".join(p for p in [*parts, f"{passed} passed" if passed else ""] if p)


def traceback_exceptions(text: str) -> Iterator[str]:
    """The exception line ending each Python traceback (`KeyError: 'port'`), at the traceback's own
    indentation (a traceback quoted or indented in prose, or in Claude Code's export, too)."""
    for n, head in enumerate(_TRACEBACK.finditer(text)):
        if n >= MAX_TRACEBACKS:
            return
        indent = head.group(1)
        body = text[head.end() : head.end() + 40_000].split("\n", TRACEBACK_LINES + 1)[1 : TRACEBACK_LINES + 1]
        for line in body:
            line = line[:MAX_LINE_CHARS].rstrip()
            if not line.strip():
                continue
            if not line.startswith(indent):
                break  # the traceback's block has ended
            rest = line[len(indent) :]
            if rest[:1] in (" ", "\t"):
                continue  # a frame
            match = _EXCEPTION_LINE.match(rest)
            if match and (match.group(2) is not None or match.group(1).endswith(_EXCEPTION_ENDS)):
                name, message = match.group(1), (match.group(2) or "").strip()
                yield f"{name}: {message}" if message else name
            break
