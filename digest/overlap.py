"""Extractive fragments (Grusky et al. 2018, Newsroom): the longest shared token runs by which a
summary copies its source, found greedily from the summary's first token on. Their coverage (the
share of the summary's tokens inside a fragment) and density (the mean squared fragment length per
summary token) say how extractive a summary is; the share of its tokens in *long* fragments says
how much of it is copied text rather than written (docs/fidelity.md)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

LONG = 8  # tokens: a fragment this long is copied text, not a shared name or phrase
_TOKEN = re.compile(r"\w+")
_GAP = "\x00"  # between two sources: no fragment runs across it


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class Source:
    """Texts a summary may copy from, tokenized once and indexed by token (the session's turns and
    the prompt's instructions, say); a fragment remembers which text it came from."""

    def __init__(self, texts: Sequence[tuple[str, str]]):
        self.tokens: list[str] = []
        self.labels: list[tuple[int, str]] = []  # (first position, label) of each text
        for label, text in texts:
            self.labels.append((len(self.tokens), label))
            self.tokens.extend(tokens(text))
            self.tokens.append(_GAP)
        self.positions: dict[str, list[int]] = defaultdict(list)
        for i, token in enumerate(self.tokens):
            self.positions[token].append(i)

    def label_at(self, position: int) -> str:
        return next(label for start, label in reversed(self.labels) if start <= position)


@dataclass(frozen=True)
class Fragments:
    spans: list[tuple[int, int, str]]  # (summary token index, length, source label), in order
    summary_tokens: list[str]

    @property
    def coverage(self) -> float:
        n = len(self.summary_tokens)
        return sum(length for _, length, _ in self.spans) / n if n else 0.0

    @property
    def density(self) -> float:
        n = len(self.summary_tokens)
        return sum(length * length for _, length, _ in self.spans) / n if n else 0.0

    def copied(self, label: str | None = None) -> float:
        """The share of the summary's tokens in fragments of at least `LONG` tokens (from `label`)."""
        n = len(self.summary_tokens)
        long = sum(length for _, length, source in self.spans if length >= LONG and label in (None, source))
        return long / n if n else 0.0

    @property
    def longest(self) -> int:
        return max((length for _, length, _ in self.spans), default=0)

    def texts(self, minimum: int = LONG, limit: int = 5) -> list[dict]:
        """The longest fragments of at least `minimum` tokens, as evidence."""
        spans = sorted((s for s in self.spans if s[1] >= minimum), key=lambda s: (-s[1], s[0]))[:limit]
        return [
            {"text": " ".join(self.summary_tokens[i : i + length]), "tokens": length, "source": source}
            for i, length, source in spans
        ]


def fragments(source: Source, summary: str) -> Fragments:
    """Greedy: at each summary token, the longest run the source shares from there (Grusky's F(A, S))."""
    summary_tokens = tokens(summary)
    spans: list[tuple[int, int, str]] = []
    src = source.tokens
    i = 0
    while i < len(summary_tokens):
        best, at = 0, -1
        for j in source.positions.get(summary_tokens[i], ()):
            k = 1
            while i + k < len(summary_tokens) and j + k < len(src) and summary_tokens[i + k] == src[j + k]:
                k += 1
            if k > best:
                best, at = k, j
        if best:
            spans.append((i, best, source.label_at(at)))
            i += best
        else:
            i += 1
    return Fragments(spans, summary_tokens)
