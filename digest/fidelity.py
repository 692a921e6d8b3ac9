"""A summary's fidelity, with no model call: the weighted share of its session's salient
identifiers that the summary's title and text name (docs/fidelity.md).

Salience: the identifiers a reader would search for, extracted from the raw turns (issue and PR
references, URLs, file paths and names, CamelCase and snake_case symbols, `name()` calls, commands,
error names), each weighted by TF-IDF: (1 + ln tf) in the session × ln((1 + N) / (1 + df)) + 1 over
the N sessions of the store, so what a session is about outranks what every session says. The top
`TOP` by weight are scored. Matching is case-insensitive on a key per identifier (a file's stem,
so `RowModel` and `src/RowModel.spec.mjs` are one), at word bounds.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from digest.overlap import Source, fragments
from digest.prompts import summary_prompt

TOP = 15  # the identifiers scored per session
FLOOR = 0.2  # the asset check warns on a summary under this (docs/fidelity.md)

# Tokens are split at whitespace and punctuation; a name right before "(" is a call.
_SPLIT = str.maketrans({**{c: " " for c in "`'\"[]{}<>,;)=+*!?|&"}, "(": "( "})
_GH_REF = re.compile(r"/(?:issues|pull)/(\d+)")
_CAMEL = re.compile(r"[a-z0-9][A-Z]")
_NAME = re.compile(r"[^\W\d][\w$]*")
_EXTENSIONS = frozenset(
    "py mjs cjs js ts tsx jsx md json yaml yml toml sql sh css scss html rs go java kt c h cpp hpp rb php txt lock "
    "cfg ini".split()
)
_COMMANDS = frozenset(
    "npm npx pnpm yarn git pytest python python3 make cargo go docker uv pip node gh ruff dagster".split()
)
_WORD = re.compile(r"[^\W\d_][\w'-]{4,}")  # the fallback terms of a session with no identifier
_STEMS = {"index", "main", "readme", "test", "tests", "src", "lib", "utils", "package", "init", "__init__", "setup"}
_STOPWORDS = set(
    "about above after again agent being below between could doing during every first found further having "
    "other response prompt thought should their there these thing those through under until using where "
    "which while would yours user".split()
)


def _stem(path: str) -> str | None:
    """A file's (or folder's) match key: its last part before the first dot, lowercased."""
    stem = path.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0].lower()
    return None if len(stem) < 3 or stem in _STEMS else stem


def _symbol(name: str) -> str | None:
    """A code symbol's key: CamelCase, snake_case, an error name; None for a plain word."""
    if len(name) < 3 or not _NAME.fullmatch(name):
        return None
    inner = name.strip("_")
    if _CAMEL.search(name) or ("_" in inner and any(c.isalpha() for c in inner)):
        return name.lower()
    if name.endswith(("Error", "Exception")) or (name[0] == "E" and name.isupper() and 4 <= len(name) <= 10):
        return name.lower()
    return None


def extract(text: str) -> Counter:
    """The session's identifiers: match key → occurrences (one token is one occurrence)."""
    found: Counter = Counter()
    previous = ""
    for token in text.translate(_SPLIT).split():
        call = token[-1] == "("
        token = token.rstrip(".:(")
        if not token:
            continue
        command, previous = previous, token
        if command in _COMMANDS and token[:1].islower() and token.isascii():
            if token == "run":
                previous = command
                continue
            found[f"{command} {token}"] += 1
            continue
        if not call and token.isalpha() and (token.islower() or token.istitle()):
            continue  # a plain word: the fast path of most tokens
        if token.startswith(("http://", "https://")):
            ref = _GH_REF.search(token)
            address = token.lower().split("://", 1)[1].rstrip("/")
            if ref or address:  # a bare scheme (`f"http://{host}"`) names nothing
                found["#" + ref.group(1) if ref else address] += 1
        elif token[:1] == "#" and token[1:].isdigit() and len(token) > 2:
            found[token] += 1
        elif token[:3] == "GH-" and token[3:].isdigit():
            found["#" + token[3:]] += 1
        elif "/" in token:
            if any(c.isalpha() for c in token) and (key := _stem(token)):
                found[key] += 1
        elif "." in token and token.rsplit(".", 1)[-1].lower() in _EXTENSIONS:
            if key := _stem(token):
                found[key] += 1
        else:
            parts = token.split(".")
            for i, part in enumerate(parts):
                if call and i == len(parts) - 1:
                    key = part.lower() if len(part) >= 3 and _NAME.fullmatch(part) else None
                else:
                    key = _symbol(part)
                if key:
                    found[key] += 1
    return found


def fallback_terms(text: str) -> Counter:
    """Plain content words, for a session that names no identifier at all."""
    return Counter(w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS)


def turn_terms(document: str) -> tuple[Counter, bool]:
    """A turn's identifiers; or, when it names none, its plain content words (True): all a session
    needs of the turn, since its words count only when no turn of it names an identifier."""
    found = extract(document)
    return (found, False) if found else (fallback_terms(document), True)


def session_terms(documents: Sequence[str]) -> Counter:
    """The session's identifiers: the sum of its turns' (as the store keeps them per turn in
    `turns.terms`, so an appended turn adds its own and no other's: a command ending one turn takes
    no word of the next as its argument); its plain content words when no turn names one (the same
    summed per turn or over the joined text: no word spans the join)."""
    if isinstance(documents, str):  # one text is no list of turns: its characters would be the turns
        raise TypeError("session_terms takes the session's turn documents, not one text")
    identifiers: Counter = Counter()
    words: Counter = Counter()
    for document in documents:
        found, plain = turn_terms(document)
        (words if plain else identifiers).update(found)
    return identifiers or words


@dataclass(frozen=True)
class Fidelity:
    score: float | None  # None: the session has no text to score
    found: list[str]  # the top identifiers the summary names, by weight
    missed: list[str]  # those it does not
    recall: float | None = None  # the weighted share of the top identifiers named
    precision: float = 1.0  # the share of the summary's identifiers the session has
    copied: float = 0.0  # the share of the summary's tokens in long copied fragments

    def markdown(self) -> str:
        def line(label: str, names: list[str]) -> str:
            return f"**{label}** ({len(names)}): " + (", ".join(f"`{n}`" for n in names) or "none")

        return line("found", self.found) + "\n\n" + line("missed", self.missed)


def weights(terms: Mapping[str, int], df: Mapping[str, int], n_sessions: int) -> dict[str, float]:
    """TF-IDF: (1 + ln tf) × (ln((1 + N) / (1 + df)) + 1), df counting the sessions that name it."""
    n = max(n_sessions, 1)
    return {t: (1 + math.log(tf)) * (math.log((1 + n) / (1 + df.get(t, 1))) + 1) for t, tf in terms.items()}


def mentions(summary_text: str, key: str) -> bool:
    """The key at word bounds in the summary (case-insensitive); `#n` also as a bare `n`."""
    text = summary_text.lower()
    keys = [key, key[1:]] if key.startswith("#") else [key]
    return any(re.search(rf"(?<![\w$]){re.escape(k)}(?![\w$])", text) for k in keys)


def score(
    terms: Mapping[str, int],
    summary_text: str,
    df: Mapping[str, int] | None = None,
    n_sessions: int = 1,
    *,
    precision: float = 1.0,
    copied: float = 0.0,
) -> Fidelity:
    """Recall × precision × (1 − copied): the weighted share of the session's top `TOP` terms the
    summary names, cut by the share of its own identifiers the session lacks (`precision`) and by
    the share of it copied verbatim (`copied`), so neither an echo nor invented names score well."""
    if not terms:
        return Fidelity(None, [], [])
    weighted = weights(terms, df or {}, n_sessions)
    top = sorted(weighted, key=lambda t: (-weighted[t], t))[:TOP]
    found = [t for t in top if mentions(summary_text, t)]
    missed = [t for t in top if t not in found]
    recall = sum(weighted[t] for t in found) / sum(weighted[t] for t in top)
    worth = recall * precision * (1 - copied)
    return Fidelity(round(worth, 4), found, missed, round(recall, 4), round(precision, 4), round(copied, 4))


def fidelity(
    documents: Sequence[str], title: str, summary: str, df: Mapping[str, int] | None = None, n_sessions: int = 1
):
    """One summary's fidelity to its session's turn documents (df, n_sessions: the store's document
    frequencies)."""
    terms = session_terms(documents)
    whole = session_text(documents)
    if not whole.strip():
        return Fidelity(None, [], [])
    text = f"{title}\n{summary}"
    grounded, unknown = anchors(text, whole, terms)
    copied = fragments(copy_source(whole), text).copied()
    return score(terms, text, df, n_sessions, precision=precision(grounded, unknown), copied=copied)


# --- what a summary names that its session does not (anchor precision, Nan et al. 2021) ----------

_HASH = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])")
_ISSUE_WORD = re.compile(r"\b(?:issue|pr|pull request|ticket|bug)\s+(?:no\.?\s*)?#?(\d{2,})\b", re.IGNORECASE)
# Names a summary may use that no session has to spell out: languages, products, platforms.
COMMON_NAMES = frozenset(
    "javascript typescript github gitlab duckdb postgresql mysql sqlite mongodb nodejs node vue next nuxt react "
    "angular svelte express deno graphql openai chatgpt macos ios iphone youtube vscode webpack fastapi pydantic "
    "numpy pandas dagster jupyter llama ollama smollm2 devops cicd json yaml html css".split()
)
STRONG = ("#", "/", "hash")  # an unknown issue number, path, file, URL or commit hash: fabricated on its own


def summary_identifiers(text: str) -> dict[str, str]:
    """The identifiers a summary names: key → kind (`#` an issue, `/` a path, file name or URL,
    keyed by its file name or address, `hash` a commit hash, `symbol` a symbol, call or error
    name). Commands are left out: in prose "npm and" or "make sure" is no name."""
    found: dict[str, str] = {}
    for token in text.translate(_SPLIT).split():
        token = token.rstrip(".:(")
        if not token.startswith(("http://", "https://")) and (
            "/" in token or ("." in token and token.rsplit(".", 1)[-1].lower() in _EXTENSIONS)
        ):
            name = token.rstrip("/").rsplit("/", 1)[-1].lower()
            if any(c.isalpha() for c in token) and _stem(token):
                found[name] = "/"  # a file name is as strong as its path
            continue
        for key in extract(token):
            found.setdefault(key, "#" if key.startswith("#") else "/" if "/" in key or "." in key else "symbol")
    for match in _ISSUE_WORD.finditer(text):
        found.setdefault("#" + match.group(1), "#")
    for match in _HASH.finditer(text.lower()):
        found[match.group(0)] = "hash"
    return found


def anchors(summary_text: str, session_text: str, terms: Mapping[str, int]) -> tuple[list[str], dict[str, str]]:
    """The summary's identifiers the session grounds, and those it does not, with their kind. A
    symbol or issue is grounded by the session's identifiers or the key at word bounds in its text;
    a file, path or URL by its file name or address in the text; a hash by itself or its prefix."""
    lowered = session_text.lower()
    grounded: list[str] = []
    unknown: dict[str, str] = {}
    for key, kind in summary_identifiers(summary_text).items():
        if kind in ("/", "hash"):
            known = key in lowered or key.split(".", 1)[0] in COMMON_NAMES
        else:
            known = key in terms or key in COMMON_NAMES or (key.lstrip("#") in lowered and mentions(lowered, key))
        if known:
            grounded.append(key)
        else:
            unknown[key] = kind
    return grounded, unknown


def precision(grounded: list[str], unknown: Mapping[str, str]) -> float:
    """The share of the summary's identifiers its session has (1 when it names none)."""
    named = len(grounded) + len(unknown)
    return len(grounded) / named if named else 1.0


# The fixed text of the summary prompt: a summary that copies it echoes its instructions.
PROMPT_TEXT = summary_prompt("", "", "", 0, "")


def copy_source(session_text: str) -> Source:
    """What a summary may copy from: its session's raw text and the summary prompt's own text."""
    return Source([("session", session_text), ("prompt", PROMPT_TEXT)])


def session_text(documents: Iterable[str]) -> str:
    return "\n".join(documents)
