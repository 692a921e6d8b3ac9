"""One session's digest: the chunk calls under the run's budget, resumed from stored chunks, then its graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from digest.attempts import GRAPH_STAGE, Ledger, call_attempt, in_flight_attempt, ledgered_call
from digest.friction import EmissionPoint, FrictionEvent, Symptom, classify_error
from digest.graph.builder import ExtractionStats, GraphBuilder, GraphEdge, GraphNode, merge_extractions
from digest.graph.chunking import Chunk, chunk_turns
from digest.graph.extraction import (
    GraphExtraction,
    GraphParseError,
    build_extraction_prompt,
    extraction_json_schema,
    parse_extraction,
    salvage_cut_reply,
)
from digest.graph.policy import (
    MIN_CHUNK_CONTENT_BYTES,
    GraphPolicy,
    chunk_content_budget_bytes,
    graph_limits,
    prompt_window_tokens,
)
from digest.graph.provenance import add_provenance
from digest.model_api import ChatClient, ChatReply, ModelError
from digest.pacing import Pacer
from digest.prompts import TURN_SEPARATOR
from digest.summary_output import SourceTier
from digest.synthesis import Limits, prompt_friction
from digest.turns import Turn, canonical_order, input_revision

CONSUMER = "session_graph"
SERVICE_DOMAIN = "dream-pipeline"


@dataclass(frozen=True)
class SessionGraph:
    session_id: str
    input_revision: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    chunks: int
    cut_replies: int  # chunks whose reply hit the output cap; their complete items were kept
    stats: ExtractionStats
    issues: int


@dataclass(frozen=True)
class DigestResult:
    graph: SessionGraph | None
    failure: Symptom | None  # the friction symptom that stopped it
    chunks_planned: int
    chunks_done: int
    note: str = ""
    left_for_later: int = 0  # chunks the run's budget did not reach: the next run does them
    chunks_resumed: int = 0  # results stored by earlier runs, used with no model call
    model_seconds: float = 0.0


class ChunkStore(Protocol):
    """Where finished chunk results are kept between runs (DuckDB in production), keyed by session,
    input revision, chunk index and the chunk's text digest: a session cut short by the budget goes
    on in the next run, and no chunk is sent twice."""

    def finished_chunks(self, session_id: str, revision: str) -> dict[tuple[int, str], tuple[GraphExtraction, bool]]:
        """(index, digest) → (extraction, whether its reply was cut at the output cap)."""
        ...

    def save_chunk(
        self, session_id: str, revision: str, chunk: Chunk, extraction: GraphExtraction, cut: bool, model: str
    ) -> None: ...


def _friction(session_id, client, limits, prompt, symptom, point, note, error=None) -> FrictionEvent:
    return prompt_friction(CONSUMER, session_id, client, limits, prompt, symptom, point, note, error, SERVICE_DOMAIN)


def _extract(
    client: ChatClient,
    chunk: Chunk,
    total: int,
    limits: Limits,
    policy: GraphPolicy,
    ledger: Ledger,
    session_id: str,
    pacer: Pacer,
) -> tuple[GraphExtraction | None, BaseException | None, str, bool, float]:
    """One chunk's model call, its attempt recorded whatever happens; True when its reply was cut
    at the output cap and only its complete items were kept; the call's model seconds."""
    prompt = build_extraction_prompt(chunk.text)
    reply: ChatReply | None = None
    error: BaseException | None = None
    extraction = None
    cut = False
    plan = pacer.plan(limits.estimate_tokens(prompt), policy.output_limit_tokens, client.streaming)
    # Tier raw: graph evidence is always the raw turns.
    in_flight = in_flight_attempt(session_id, GRAPH_STAGE, SourceTier.RAW, prompt, limits, client.model, plan.timeout_s)
    with ledgered_call(ledger, in_flight) as started:
        try:
            reply = client.chat(
                prompt,
                schema=extraction_json_schema(),
                max_output_tokens=policy.output_limit_tokens,
                timeout_s=plan.timeout_s,
                stall_s=plan.stall_s,
            )
            try:
                extraction = parse_extraction(reply.text)
            except GraphParseError:
                if reply.finish_reason != "length":
                    raise
                extraction, cut = salvage_cut_reply(reply.text), True
        except (ModelError, GraphParseError) as exc:
            error = exc
    where = f"chunk {chunk.index + 1}/{total}: "
    attempt = call_attempt(in_flight, reply, error, where, plan=plan)
    ledger.record_attempt(attempt, started)
    pacer.observe(attempt.speed_sample(), error)
    return extraction, error, prompt, cut, attempt.duration_s


def digest_session(
    turns: list[Turn],
    summary: dict,
    client: ChatClient,
    limits: Limits,
    policy: GraphPolicy,
    ledger: Ledger,
    chunk_store: ChunkStore | None = None,
    pacer: Pacer | None = None,
) -> DigestResult:
    """The session's graph: provenance from the stored rows, semantics from the model over raw
    turn chunks. The first failed chunk stops the digest (friction recorded, no graph), so a
    failing session costs one call a try, not one per chunk. A chunk is started only while the
    run's model time (`policy.budget_s`) is left; with `chunk_store`, finished chunks are kept
    there and a later run starts where this one stopped. `pacer`: each call's deadlines
    (`digest.pacing`); default `policy.timeout_s`, fixed."""
    pacer = pacer or Pacer.fixed(policy.timeout_s)
    if not turns:
        raise ValueError("a session with no turns cannot be digested")
    ordered = canonical_order(turns)
    session_id = ordered[0].session_id
    budget = chunk_content_budget_bytes(limits, policy)
    window = prompt_window_tokens(limits, policy)
    limits = graph_limits(limits, policy)
    chunks = chunk_turns(ordered, max(budget, 1))
    over = None
    if budget < MIN_CHUNK_CONTENT_BYTES:
        over = f"the prompt window ({window} tokens) leaves {budget} bytes for turn text"
    elif len(chunks) > policy.max_chunks:
        over = f"{len(chunks)} chunks of {budget} bytes needed, over DIGEST_GRAPH_MAX_CHUNKS={policy.max_chunks}"
    if over:
        whole = build_extraction_prompt(TURN_SEPARATOR.join(t.document for t in ordered))
        ledger.record_friction(
            _friction(
                session_id,
                client,
                limits,
                whole,
                Symptom.SIZE_PRECHECK_SKIP,
                EmissionPoint.PRE_INVOCATION,
                f"no graph call: {over}",
            )
        )
        return DigestResult(None, Symptom.SIZE_PRECHECK_SKIP, len(chunks), 0, over)

    revision = input_revision(ordered)
    finished = chunk_store.finished_chunks(session_id, revision) if chunk_store else {}
    extractions: list[tuple[Chunk, GraphExtraction]] = []
    cut_replies = resumed = 0
    spent = 0.0
    for chunk in chunks:
        stored = finished.get((chunk.index, chunk.digest))
        if stored is not None:
            extraction, cut = stored
            resumed += 1
        elif spent >= policy.budget_s:
            left = sum((c.index, c.digest) not in finished for c in chunks[chunk.index :])
            note = (
                f"{len(chunks) - left}/{len(chunks)} chunks done, {spent:.0f}s of the {policy.budget_s:g}s "
                "budget spent: the next run goes on from here"
            )
            return DigestResult(
                None, None, len(chunks), len(chunks) - left, note, left_for_later=left, chunks_resumed=resumed,
                model_seconds=spent,
            )  # fmt: skip
        else:
            extraction, error, prompt, cut, seconds = _extract(
                client, chunk, len(chunks), limits, policy, ledger, session_id, pacer
            )
            spent += seconds
            if error is not None:
                symptom = classify_error(error)
                note = f"chunk {chunk.index + 1}/{len(chunks)}"
                ledger.record_friction(
                    _friction(
                        session_id, client, limits, prompt, symptom, EmissionPoint.POST_INVOCATION_FAILURE, note, error
                    )
                )
                return DigestResult(
                    None, symptom, len(chunks), chunk.index, f"{note}: {error}", chunks_resumed=resumed,
                    model_seconds=spent,
                )  # fmt: skip
            if chunk_store is not None:
                chunk_store.save_chunk(session_id, revision, chunk, extraction, cut, client.model)
        cut_replies += cut
        extractions.append((chunk, extraction))

    builder = GraphBuilder()
    issues = add_provenance(builder, ordered, summary)
    stats = merge_extractions(builder, session_id, extractions)
    graph = SessionGraph(
        session_id=session_id,
        input_revision=revision,
        nodes=list(builder.nodes.values()),
        edges=list(builder.edges.values()),
        chunks=len(chunks),
        cut_replies=cut_replies,
        stats=stats,
        issues=issues,
    )
    return DigestResult(graph, None, len(chunks), len(chunks), chunks_resumed=resumed, model_seconds=spent)
