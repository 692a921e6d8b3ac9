"""A turn's card: the line the degraded prompt gives a turn that has no mini summary, made from the
turn's own text with no model call: what was asked, the files edited and created, the commands with
their exit status, the errors, the commits and tests, and the gist of the reply. Every word is the
turn's own or a fixed label, so a small model given these lines reads the session's facts instead of
the first characters of each turn, which are mostly the prompt's boilerplate or a tool call's head.
"""

from __future__ import annotations

import re

from digest.card import PROMPT_CHARS, clean_prompt, gist, reply_gist
from digest.facts import extract_facts
from digest.turns import Turn, split_document

ASK_CHARS = 100
REPLY_GIST_CHARS = 90
FILES = 3  # file names listed per turn
COMMANDS = 2  # commands listed per turn, the failed first
VALUE_CHARS = 60  # of one command, error or commit


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _listed(values: list[str], shown: int, limit: int) -> str:
    words = ", ".join(_cut(v, limit) for v in values[:shown])
    return words + (f" (+{len(values) - shown})" if len(values) > shown else "")


def turn_card(turn: Turn) -> str:
    """The turn's card line, or "" when its text gives neither an ask, a fact nor a reply."""
    prompt, response = split_document(turn.document or "")
    try:
        facts = extract_facts(prompt, response, turn.agent)
    except Exception:  # whatever the text holds: a turn with no facts, never a failed summary
        facts = []
    by_kind: dict[str, dict[str, str | None]] = {}
    for f in facts:
        by_kind.setdefault(f.kind, {})[f.value.strip()] = f.detail
    parts = []
    if ask := gist(clean_prompt(prompt[:PROMPT_CHARS]), ASK_CHARS):
        parts.append(f"asked: {ask}")
    created = list(by_kind.get("file-create", {}))
    edited = [v for v in by_kind.get("file-edit", {}) if v not in created]
    for label, files in (("edited", edited), ("created", created)):
        if files:
            parts.append(f"{label}: " + _listed([f.rsplit("/", 1)[-1] for f in files], FILES, 40))
    commands = [
        f"{v.splitlines()[0] if v else v}" + (f" → {d}" if d else "") for v, d in by_kind.get("command", {}).items()
    ]
    commands.sort(key=lambda c: 0 if re.search(r"→ exit [1-9]", c) else 1)
    if commands:
        parts.append("ran: " + _listed(commands, COMMANDS, VALUE_CHARS))
    if tests := list(by_kind.get("test", {})):
        parts.append(f"tests: {_cut(tests[-1], VALUE_CHARS)}")
    if errors := list(by_kind.get("error", {})):
        parts.append("error: " + _listed(errors, 1, VALUE_CHARS))
    if commits := [f"{v[:7]} {d or ''}".strip() for v, d in by_kind.get("commit", {}).items()]:
        parts.append("commit: " + _listed(commits, 1, VALUE_CHARS))
    if reply := reply_gist(response, REPLY_GIST_CHARS):
        parts.append(f"replied: {reply}")
    return "; ".join(parts)
