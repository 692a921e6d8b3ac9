"""Turn-aligned chunks of a session's raw turns, each within the prompt's byte budget."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from digest.prompts import TURN_SEPARATOR
from digest.turns import Turn


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    turn_ids: tuple[str, ...]  # the turns whose text (whole, or a piece) it carries

    @property
    def digest(self) -> str:
        """Names the chunk's range of text: a stored result is reused only for the same text."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _split_bytes(text: str, budget: int) -> list[str]:
    """Pieces of at most `budget` UTF-8 bytes, cut between characters."""
    data, pieces, start = text.encode("utf-8"), [], 0
    while start < len(data):
        end = min(start + budget, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # inside a multi-byte character
            end -= 1
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return pieces


def split_oversized(text: str, budget: int) -> list[str]:
    """A turn too large for a chunk on its own: pieces on line boundaries, a longer line on
    character boundaries, each piece within `budget` bytes."""
    if _byte_len(text) <= budget:
        return [text]
    pieces, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        n = _byte_len(line)
        if size + n > budget and current:
            pieces.append("".join(current))
            current, size = [], 0
        if n > budget:
            pieces.extend(_split_bytes(line, budget))
        else:
            current.append(line)
            size += n
    if current:
        pieces.append("".join(current))
    return pieces


def chunk_turns(turns: list[Turn], budget_bytes: int) -> list[Chunk]:
    """Turn-aligned chunks of the turn documents, each within `budget_bytes`: whole turns joined
    by the summary's separator, and a turn over the budget split into budget-sized pieces."""
    separator = _byte_len(TURN_SEPARATOR)
    chunks: list[Chunk] = []
    texts: list[str] = []
    ids: list[str] = []
    size = 0

    def flush() -> None:
        if texts:
            chunks.append(Chunk(len(chunks), TURN_SEPARATOR.join(texts), tuple(dict.fromkeys(ids))))
            texts.clear()
            ids.clear()

    for turn in turns:
        if not turn.document.strip():
            continue
        for piece in split_oversized(turn.document, budget_bytes):
            n = _byte_len(piece)
            if texts and size + separator + n > budget_bytes:
                flush()
            size = n if not texts else size + separator + n
            texts.append(piece)
            ids.append(turn.id)
    flush()
    return chunks
