"""The search index's tokenizer and snippets (pure): code-aware terms for documents and queries.

A raw token is a run of word characters joined by `. / - : # @` (a path, a dotted name, a
kebab-case word). Each is emitted whole and by its parts, so `src/app/settings.py` is found by
itself, by `settings.py` (the file name with its extension), by `settings` and by `app` (not by
`py`: an extension is no term of its own); a
`snake_case` or `CamelCase` name by itself and by its words (`ReconnectLoop` → `reconnectloop`,
`reconnect`, `loop`). Text is NFKC-folded and lower-cased. A short English stop-word list is
left out of plain words (never out of a compound's whole), and so are numbers of one or two digits
(line numbers, counts: a third of a log's terms). Queries go through the same function.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator

# Bumped when the terms a text gives change: every session is indexed again at the next refresh.
TOKENIZER_VERSION = 1

_RAW = re.compile(r"\w+(?:[./\-:#@]\w+)*")
_SEPARATORS = re.compile(r"[./\-:#@_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_HEX = re.compile(r"(?=[a-f]*\d)[0-9a-f]{7,64}")
# Longer raw tokens are blobs (base64, minified code): their parts only.
MAX_WHOLE = 80
MAX_TERM = 40

# A file name's extension is not a term of its own.
EXTENSIONS = frozenset(
    "py pyi ts tsx js jsx mjs cjs go rs java kt c h cc cpp hpp cs rb php swift scala sh md rst txt json yaml yml "
    "toml ini cfg lock sql html css scss xml csv log".split()
)

STOP_WORDS = frozenset(
    """a an and are as at be but by can did do does for from had has have he her his how i if in into is it
    its me my no not of on or our she so that the their them then there these they this those to too us was
    we were what when where which who why will with would you your""".split()
)


def fold(text: str) -> str:
    """NFKC-folded text (full-width letters, ligatures, compatibility forms as their plain kind)."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


# Raw tokens already split, by token: most repeat (a name, a path, a word). Emptied when full.
_CACHE: dict[str, tuple[str, ...]] = {}
_CACHE_MAX = 1 << 19


def _token_terms(raw: str) -> tuple[str, ...]:
    """The terms one raw token gives (cached)."""
    found = _CACHE.get(raw)
    if found is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        found = _CACHE[raw] = _split(raw)
    return found


def _split(raw: str) -> tuple[str, ...]:
    """The terms one raw token gives: the whole, its segments, its words, their camel-case parts."""
    terms: list[str] = []
    lower = raw.lower()
    if len(lower) <= MAX_WHOLE:
        terms.append(lower)
    if "/" in raw:
        for segment in raw.split("/"):
            if segment and segment != raw:
                terms.extend(_split(segment))
        return tuple(dict.fromkeys(terms))
    words = [w for w in _SEPARATORS.split(raw) if w]
    if len(words) > 1 and "." in raw:
        # A dotted name or a file name: its stem too (`os.path` of `os.path.join`, `test_app` of
        # `test_app.py`); a file's extension is no term of its own (`py` would find every file).
        stem, _, last = raw.rpartition(".")
        if "." in stem or len(words) > 2:
            terms.append(stem.lower())
        if last.lower() in EXTENSIONS:
            words = words[:-1]
    for word in words:
        # A hash (`3f9a2bc`) or a non-ASCII word stays whole.
        parts = _CAMEL.findall(word) if word.isascii() and not _HEX.fullmatch(word) else [word]
        if len(words) > 1 or len(parts) > 1 or word != raw:
            terms.append(word.lower())
        if len(parts) > 1:
            terms.extend(p.lower() for p in parts)
    out = []
    for term in dict.fromkeys(terms):
        if len(term) > MAX_TERM and term != lower:
            continue
        if len(term) < 2 and term != lower or len(term) < 3 and term.isdigit():
            continue
        if term in STOP_WORDS:
            continue
        out.append(term)
    return tuple(out)


def raw_tokens(text: str) -> list[re.Match]:
    return list(_RAW.finditer(fold(text)))


def terms(text: str) -> list[str]:
    """Every term of the text in order, a raw token's whole before its parts (repeats kept: term frequency)."""
    out: list[str] = []
    for match in _RAW.finditer(fold(text)):
        out.extend(_token_terms(match.group()))
    return out


def term_counts(text: str) -> Counter:
    """Each term's count in the text (as `Counter(terms(text))`, counting each distinct raw token once)."""
    counts: Counter = Counter()
    get = _CACHE.get
    for raw, n in Counter(_RAW.findall(fold(text))).items():
        for term in get(raw) or _token_terms(raw):
            counts[term] += n
    return counts


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in order."""
    return list(dict.fromkeys(terms(query)))


# --- snippets ------------------------------------------------------------------------------------

SNIPPET_CHARS = 200
_RUN = re.compile(r"[\w./\-:#@]+")
_RUN_OR_NONE = re.compile(r"[\w./\-:#@]*")
OCCURRENCES = 60  # of each query term, looked at for the snippet


def snippet(text: str, query: list[str], width: int = SNIPPET_CHARS) -> str:
    """About `width` characters of `text` around the weightiest run of the query's terms, each raw token
    that gives one of them wrapped in **...**; the text's start when none occurs."""
    text = fold(text)
    wanted = set(query)
    # Only the runs of token characters around a query term's first occurrences are split into terms.
    runs = set()
    lowered = text.lower() if text.isascii() else None
    for term in wanted:
        for start in _occurrences(term, text, lowered):
            # The run's start: the token characters just before, read backwards.
            before = _RUN_OR_NONE.match(text[max(0, start - 200) : start][::-1]).end()
            runs.add((start - before, _RUN.match(text, start).end()))
    hits: list[tuple[int, int, set[str]]] = []
    for lo, hi in sorted(runs):
        for m in _RAW.finditer(text, lo, hi):
            found = set(_token_terms(m.group())) & wanted
            if found and (not hits or m.start() >= hits[-1][1]):
                hits.append((m.start(), m.end(), found))
    if not hits:
        return _squeeze(text[:width]) + ("…" if len(text) > width else "")
    # The window whose distinct terms weigh most, a longer term (a whole path) weighing more: the
    # window's end moves on as its start does.
    best, best_weight, weight, end = 0, -1, 0, 0
    inside: Counter = Counter()
    for i, (start, _, _) in enumerate(hits):
        while end < len(hits) and hits[end][0] - start <= width * 0.7:
            for term in hits[end][2]:
                inside[term] += 1
                weight += len(term) if inside[term] == 1 else 0
            end += 1
        if weight > best_weight:
            best, best_weight = i, weight
        for term in hits[i][2]:
            inside[term] -= 1
            weight -= len(term) if inside[term] == 0 else 0
    lo = max(0, hits[best][0] - width // 4)
    # Start at a word's edge.
    if lo > 0:
        space = text.rfind(" ", max(0, lo - 20), lo)
        lo = space + 1 if space >= 0 else lo
    hi = min(len(text), lo + width)
    out, at = [], lo
    for s, e, _ in hits:
        if s < lo or e > hi:
            continue
        out.append(text[at:s])
        out.append(f"**{text[s:e]}**")
        at = e
    out.append(text[at:hi])
    return ("…" if lo > 0 else "") + _squeeze("".join(out)) + ("…" if hi < len(text) else "")


def _occurrences(term: str, text: str, lowered: str | None) -> Iterator[int]:
    """Where the first `OCCURRENCES` of `term` (lower-case) start in `text`, ignoring case and not
    overlapping. An ASCII text is searched lower-cased (`lowered`), as a case-blind regex would find
    the same places there, several times faster on a long tool output."""
    if lowered is None or not term.isascii():
        for n, occurrence in enumerate(re.finditer(re.escape(term), text, re.I)):
            if n == OCCURRENCES:
                return
            yield occurrence.start()
        return
    at = lowered.find(term)
    for _ in range(OCCURRENCES):
        if at < 0:
            return
        yield at
        at = lowered.find(term, at + len(term))


def _squeeze(text: str) -> str:
    return " ".join(text.split())
