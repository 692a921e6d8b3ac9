"""The claims a summary makes that its session can confirm or not, with no model call: the
technologies it lists or names, the commands and code it quotes in backticks, the messages it quotes
in double quotes. A claim is founded when the session's own text holds it (a technology also when
the session's files or commands imply it: `.py` files are Python, `npm` is Node.js). The card says
nothing its turns do not, so its facts are the turns' words too: the turns are checked.

`digest.verdict` asks `unfounded` after its own identifier rule (a path, symbol or hash no turn has):
a summary that names more things the session never mentions than it names things it does, or
`UNFOUNDED` of them, is fabricated. A summary of invented facts is not `ok`, so it is neither the
session's account nor in the search index.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

UNFOUNDED = 2  # this many unfounded claims: fabricated whatever else the summary names
QUOTE_WORDS = 3  # a quoted phrase of this many words is a claim that the session said it
MIN_SPAN_CHARS = 3

# Product names a summary may name in prose: a name here that the session never says, nor implies,
# is a claim it cannot back. Words that are also plain English ("react", "express", "go", "swift",
# "spring", "next") are left out: in prose they are not names.
NAMED = frozenset(
    """laravel django flask fastapi mongodb postgresql postgres mysql sqlite redis kafka kubernetes docker terraform
    ansible tensorflow pytorch pandas numpy angular svelte nuxt tailwind bootstrap jquery webpack vite graphql
    firebase supabase aws azure heroku vercel netlify wordpress shopify unity flutter kotlin typescript javascript
    python java ruby rails php rust golang elasticsearch nginx selenium playwright puppeteer jest pytest mocha
    cypress ollama openai chatgpt langchain huggingface pydantic dagster duckdb electron node.js nodejs deno prisma
    sequelize mongoose symfony vue.js next.js nestjs hibernate matplotlib scikit-learn keras opencv spark hadoop
    airflow jenkins circleci laravel.js express.js react.js spring-boot .net c# c++ swiftui""".split()
)
# Names any session may fairly be said to involve: not a claim about this one.
ANY_SESSION = frozenset(
    "git github json markdown shell bash terminal cli api http https ai llm code ide vscode editor".split()
)
# What in a session implies a technology that it may never name (a file's extension, a tool).
IMPLIED = {
    "python": r"\.py\b|\bpip3?\b|\bpytest\b|\bpython3?\b",
    "javascript": r"\.[mc]?jsx?\b|\bnpm\b|\bnpx\b|\byarn\b|\bpnpm\b|\bnode\b",
    "node.js": r"\.[mc]?jsx?\b|\bnpm\b|\bnpx\b|\byarn\b|\bpnpm\b|package\.json",
    "typescript": r"\.tsx?\b|\btsc\b|tsconfig",
    "html": r"\.html?\b|<html|<div",
    "css": r"\.s?css\b|\bclassname\b|tailwind|style=",
    "react": r"\.jsx\b|\.tsx\b|usestate|useeffect",
    "rust": r"\.rs\b|\bcargo\b",
    "go": r"\.go\b|\bgo\.mod\b",
    "java": r"\.java\b|\bmaven\b|\bgradle\b",
    "c#": r"\.cs\b|\.csproj\b|\bdotnet\b",
    ".net": r"\.cs\b|\.csproj\b|\bdotnet\b",
    "c++": r"\.(?:cpp|cc|hpp|cxx)\b|\bcmake\b",
    "php": r"\.php\b|\bcomposer\b",
    "ruby": r"\.rb\b|\bgem\b|\bbundle\b",
    "sql": r"\bselect\b.{1,80}\bfrom\b|\.sql\b|\bcreate table\b",
    "yaml": r"\.ya?ml\b",
    "docker": r"dockerfile|docker-compose|\bdocker\b",
}
_ALIASES = {"nodejs": "node.js", "node": "node.js", "js": "javascript", "ts": "typescript", "golang": "go",
            "postgres": "postgresql", "react.js": "react", "reactjs": "react", "vue": "vue.js", "vuejs": "vue.js",
            "next": "next.js", "nextjs": "next.js", "py": "python", "python3": "python"}  # fmt: skip
_VERSION = re.compile(r"[\s_@-]*v?\d+(?:\.[\dx]+)*(?:[-.][\w.]+)?$")
_BACKTICKS = re.compile(r"`([^`\n]{3,120})`")
_QUOTED = re.compile(r"[\"“]([^\"”\n]{8,200})[\"”]")
_NAME = re.compile(
    r"(?<![\w.#+-])(" + "|".join(re.escape(n) for n in sorted(NAMED, key=len, reverse=True)) + r")(?![\w#+-])",
    re.IGNORECASE,
)
_WORDS = re.compile(r"\w{2,}")


@dataclass(frozen=True)
class Claims:
    founded: list[str] = field(default_factory=list)
    unfounded: list[str] = field(default_factory=list)  # each with its kind: "technology: Laravel"


def _technology(name: str) -> str:
    key = _VERSION.sub("", " ".join(name.lower().split())).strip(" .,;:")
    return _ALIASES.get(key, key)


def _said(lowered: str, phrase: str) -> bool:
    """The phrase in the session's text at word bounds (a name ending in `#` or `+` ends where it ends)."""
    return re.search(rf"(?<![\w]){re.escape(phrase)}(?![\w])", lowered) is not None


def _technology_founded(name: str, lowered: str, squashed: str) -> bool:
    if not name or name in ANY_SESSION:
        return True
    variants = {name, name.replace(" ", "-"), name.replace(" ", ""), name.removesuffix(".js"), name.removesuffix("js")}
    if any(len(v) >= 2 and _said(lowered, v) for v in variants):
        return True
    if len(name) >= 4 and re.sub(r"[\s._-]", "", name) in squashed:  # "tailwind css" in "tailwindcss"
        return True
    implied = IMPLIED.get(name)
    return implied is not None and re.search(implied, lowered) is not None


def check(session_text: str, title: str, summary: str, technologies: Sequence[str] = (), identifiers=()) -> Claims:
    """The summary's claims against its session's text (`identifiers`: the keys of the identifiers
    the verdict's own rule already checked, not counted twice)."""
    lowered = session_text.lower()
    squashed = re.sub(r"[\s._-]", "", lowered)
    spaced = " ".join(lowered.split())
    text = f"{title}\n{summary}"
    founded, unfounded = [], []
    seen: set[str] = set()

    def note(kind: str, shown: str, ok: bool) -> None:
        (founded if ok else unfounded).append(f"{kind}: {shown}")

    names = [t for t in technologies if isinstance(t, str)] + [m.group(1) for m in _NAME.finditer(text)]
    for raw in names:
        name = _technology(raw)
        if name and name not in seen:
            seen.add(name)
            note("technology", raw.strip(), _technology_founded(name, lowered, squashed))
    known = {i.lower() for i in identifiers}
    for match in _BACKTICKS.finditer(text):
        span = " ".join(match.group(1).lower().split())
        if span in seen or span in known or span.rsplit("/", 1)[-1] in known or _technology(span) in seen:
            continue
        seen.add(span)
        words = _WORDS.findall(span)
        ok = span in spaced or (len(words) > 1 and all(_said(lowered, w) for w in words))
        note("quoted code", match.group(1), ok)
    for match in _QUOTED.finditer(text):
        phrase = " ".join(match.group(1).lower().split())
        if len(phrase.split()) < QUOTE_WORDS or phrase in seen:
            continue
        seen.add(phrase)
        note("quoted", match.group(1), phrase in spaced)
    return Claims(founded, unfounded)


def unfounded(claims: Claims, grounded_identifiers: int) -> bool:
    """Fabricated by its claims: `UNFOUNDED` or more not in the session, or more of them not in it
    than things it names that are (its claims and its identifiers)."""
    missing = len(claims.unfounded)
    return missing >= UNFOUNDED or (missing > 0 and missing > len(claims.founded) + grounded_identifiers)
