"""`session-digest mcp`: the store's search for agents, an MCP server over stdio (the official `mcp`
SDK's `MCPServer`). Its tools carry the Neo.mjs Memory Core's names and argument shapes
(`query_summaries`, `query_raw_memories`, `get_session_memories`, `get_all_summaries`, from
neomjs/neo `ai/mcp/server/memory-core/openapi.yaml`), plus `find_sessions_by_file`.

Read-only. The two searches (`query_summaries`, `query_raw_memories`) read the search index beside
the store (`resources.store.search_reads`), opened once and kept: it takes no lock, so a search never
waits for a writer, and it sees each refresh's commit (each ingest and sweep, and the search sensor,
bring it up to date) without a restart. The vectors, where a host serves embeddings, are still the
store's. Every other tool opens the store read-only for the call's few statements and lets it go
(`StoreFile`: an open waits, with backoff, while a writer holds the file; the writer's own open waits
out ours the same way, so a sweep is never failed by it). A tool's bad arguments, an unknown
session or an empty query are answered as a tool error (`isError`) with the reason, and the server
goes on serving.

Where this differs from upstream: `get_all_summaries` applies `category` (upstream advertises it
and ignores it); a summary carries its provenance (`sourceTier`, `degraded`, `verdict`,
`navigationIndex`: a degraded summary is an index of the session); a session whose summary is junk,
or that has none yet, is served by its card (`sourceTier` `facts`: made from its own log, no model
call), so no summary judged junk is ever served; scores are
BM25's, highest first (`relevanceScore`), not a vector distance's; long texts are cut with a marker
so an answer stays a few KB.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from app.answers import (
    DEFAULT_MAX_TOKENS,
    LINE_CHARS,
    TURNS_PER_SESSION,
    accounts_of,
    blame_answer,
    cite,
    compact,
    cut,
    dumps,
    index_figures,
    iso,
    short,
    turn_rows_of,
    why_answer,
    within_budget,
)
from digest.summary_output import Category

# The tools' argument types (module level: the SDK reads the annotations by name).
NResults = Annotated[int, Field(ge=1, le=100, description="results to return, 1-100")]
MaxTokens = Annotated[
    int, Field(ge=100, le=100_000, description="the answer's size at most, in tokens (characters / 4)")
]
Full = Annotated[bool, Field(description="each result's texts whole (up to a few hundred characters), not a line")]
# Characters a text field keeps in a `full` search result (the rest is cut, with a marker saying how much).
RESULT_FIELD_CHARS = 600
# Characters all of a `get_session_memories` page's text fields share (each keeps at least 200).
PAGE_TEXT_CHARS = 48_000
# How long a call waits for a writer to let the file go before it answers that the store is busy.
LOCK_WAIT_S = 30.0


def _tools(value) -> list[str]:
    """`tools_used` as stored: a JSON array of names (NULL: none)."""
    if not value:
        return []
    try:
        names = json.loads(value)
    except ValueError:
        return [str(value)]
    return [str(n) for n in names] if isinstance(names, list) else [str(names)]


def tool(method):
    """A tool of `Tools`: the method's name is the tool's, its arguments the tool's (the SDK reads
    their annotations), its docstring the tool's description. Its answer goes out as compact JSON text
    (no structured copy beside it: an agent would read both); its caller's mistakes and a busy store
    are tool errors (`Tools.guarded`)."""

    @functools.wraps(method)
    def answered(self: Tools, *args, **kwargs) -> str:
        return dumps(self.guarded(lambda: method(self, *args, **kwargs)))

    TOOL_NAMES.append(method.__name__)
    return answered


TOOL_NAMES: list[str] = []  # in the order `tool` met them: the order the server lists them


class Tools:
    """The server's tools, one method each (`@tool`), over the store file at `db_path`: the searches
    read the search index, kept; every other tool opens the store read-only for the call. Raises
    `ToolError` with the one-line reason for anything the caller asked wrong (and for a store busy
    past `LOCK_WAIT_S`)."""

    def __init__(self, db_path: Path, embedder=None):
        self.db_path = Path(db_path)
        self.embedder = embedder  # the embeddings host's client, or None: keyword search alone
        self.index = None  # the search index, opened at the first search and kept

    def store(self):
        """The store, read-only for this call (an older one migrated at the first)."""
        from mcp.server.mcpserver.exceptions import ToolError

        from resources.store import open_store

        if not self.db_path.is_file():
            raise ToolError(f"no store at {self.db_path}: ingest some sessions first (`session-digest ingest PATH`)")
        return open_store(self.db_path, read_only=True, lock_wait_s=LOCK_WAIT_S)

    def search_source(self):
        """The search index (kept, or opened again when it was rebuilt); the store itself while none
        is built yet (its searches then find nothing and say why)."""
        from resources.store.search_index import IndexUnavailable
        from resources.store.search_reads import SearchIndex

        try:
            self.index = SearchIndex(self.db_path) if self.index is None else self.index.current()
            return self.index
        except IndexUnavailable:
            self.index = None
            return self.store()

    @staticmethod
    def guarded(answer):
        import sys

        from mcp.server.mcpserver.exceptions import ToolError

        from resources.store.search_reads import SearchError

        try:
            return answer()
        except (SearchError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            duckdb = sys.modules.get("duckdb")  # a search that read no store loaded no DuckDB
            if duckdb is not None and isinstance(exc, duckdb.IOException):
                raise ToolError(f"the store is busy or unreadable, try again: {exc}") from None
            raise

    # --- the tools, with the Memory Core's argument names ---

    @tool
    def query_summaries(
        self,
        query: Annotated[str, Field(description="words, names, paths or errors to find")],
        nResults: NResults = 10,
        category: Category | None = None,
        full: Full = False,
        maxTokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> dict:
        """Search the sessions' accounts (a session's ok summary, else its card), best first, narrowed
        by category: each session by its card line, with its matched documents cited (keyword search,
        BM25; fused with vectors where a host serves embeddings). A summary judged junk is never served."""
        from resources.hybrid_search import search_sessions

        source = self.search_source()
        found = search_sessions(source, self.embedder, query, limit=nResults, summaries_only=True, category=category)
        hits = found.hits
        rows = accounts_of(source, [h.session_id for h in hits])
        results = [
            summary_result({**rows[h.session_id], "last_activity_ms": h.last_activity_ms}, h.score, h.matches, full)
            for h in hits
            if h.session_id in rows
        ]
        answer = {"query": query, "count": len(results), "results": results, **_notice(found)}
        return within_budget(_why(source, answer, nResults, category=category), "results", maxTokens)

    @tool
    def query_raw_memories(
        self,
        query: Annotated[str, Field(description="words, names, paths or errors to find")],
        nResults: NResults = 10,
        sessionId: Annotated[str | None, Field(description="search this session's turns alone")] = None,
        full: Full = False,
        maxTokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> dict:
        """Search the raw turns (prompt, thought, response; and their mini summaries), best first:
        each a cited snippet (`cite` session:turn), two a session at most, the sessions named once by
        their card line. `full` gives the turns' texts; get_session_memories pages a session's turns."""
        from resources.hybrid_search import search_turns

        source = self.search_source()
        found = search_turns(
            source, self.embedder, query, limit=nResults if full else nResults * 3, session_id=sessionId
        )
        hits, per_session = [], {}
        for h in found.hits:
            per_session[h.session_id] = per_session.get(h.session_id, 0) + 1
            if full or per_session[h.session_id] <= TURNS_PER_SESSION:
                hits.append(h)
        hits = hits[:nResults]
        rows = turn_rows_of(source, [h.turn_id for h in hits])
        results = []
        for h in hits:
            if h.turn_id not in rows:
                continue
            row = rows[h.turn_id]
            base = memory(row, RESULT_FIELD_CHARS) if full else {
                "id": row["id"], "sessionId": row["session_id"], "timestamp": iso(row["ts_ms"]), "agent": row["agent"],
            }  # fmt: skip
            # `matched`: the turn's text, or its mini summary.
            hit = {"relevanceScore": round(h.score, 4), "matched": h.kind, "cite": cite(h.session_id, h.turn_id)}
            results.append(compact({**base, **hit, "snippet": h.snippet if full else short(h.snippet)}))
        accounts = accounts_of(source, list(dict.fromkeys(r["sessionId"] for r in results)))
        sessions = {
            sid: compact({"line": short(a["line"] or a["title"], LINE_CHARS), "project": a["project"]})
            for sid, a in accounts.items()
        }
        answer = {"query": query, "count": len(results), "sessions": sessions, "results": results, **_notice(found)}
        return within_budget(_why(source, answer, nResults, session_id=sessionId), "results", maxTokens)

    @tool
    def get_session_memories(
        self,
        sessionId: Annotated[str, Field(description="the session's id")],
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        offset: Annotated[int, Field(ge=0)] = 0,
        maxTokens: Annotated[int | None, Field(ge=100, le=1_000_000, description="the answer's size at most")] = None,
    ) -> dict:
        """A session's turns in order, oldest first, paged (`total` says how many it has)."""
        store = self.store()
        if not store.sessions.session_rows([sessionId]):
            raise ValueError(f"no session {sessionId!r} in the store")
        total, turns = store.sessions.turn_page(sessionId, offset, limit)
        share = max(200, PAGE_TEXT_CHARS // max(1, 3 * len(turns)))
        memories = [memory(t, share) for t in turns]
        answer = {
            "sessionId": sessionId,
            "count": len(memories),
            "total": total,
            "offset": offset,
            "memories": memories,
        }
        return answer if maxTokens is None else within_budget(answer, "memories", maxTokens)

    @tool
    def get_all_summaries(
        self,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
        offset: Annotated[int, Field(ge=0)] = 0,
        category: Category | None = None,
        full: Full = False,
        maxTokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> dict:
        """Every session's account (its ok summary, else its card), newest first, paged; `category`
        narrows them (applied here, unlike upstream's, which ignores it; a card has none)."""
        store = self.store()
        total, rows = store.cards.account_page(limit, offset, category)
        summaries = [summary_result(r, full=full) for r in rows]
        answer = {
            "count": len(summaries),
            "total": total,
            "offset": offset,
            "category": category,
            "summaries": summaries,
        }
        return within_budget(_why(store, answer, limit, category=category), "summaries", maxTokens)

    @tool
    def find_sessions_by_file(
        self,
        path: Annotated[str, Field(description="a path, or its tail: settings.py finds src/app/settings.py")],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        maxTokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> dict:
        """The sessions that read, edited or created a file, newest first, with the turns that did."""
        store = self.store()
        found = store.facts.sessions_by_file(path, limit)
        titles = {sid: r["title"] for sid, r in store.cards.accounts([s["session_id"] for s in found]).items()}
        results = [
            {
                "sessionId": s["session_id"],
                "title": titles.get(s["session_id"]),
                "lastActivity": iso(s["last_ms"]),
                "paths": s["paths"],
                "kinds": s["kinds"],
                "turns": [
                    {"turnId": t["turn_id"], "timestamp": iso(t["ts_ms"]), "kind": t["kind"], "path": t["path"]}
                    for t in s["turns"][:20]
                ],
                "turnCount": len(s["turns"]),
            }
            for s in found
        ]
        answer = {"path": path, "count": len(results), "results": results}
        if not results:
            answer["why"] = f"no session read, edited or created a file whose path is or ends with {path!r}"
        return within_budget(answer, "results", maxTokens)

    @tool
    def blame_file(
        self,
        path: Annotated[str, Field(description="a path, or its tail: settings.py finds src/app/settings.py")],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        maxTokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> dict:
        """The sessions that edited or created a file, newest first, each with the turns that
        changed it, its commands (with their exit status) and its commits."""
        return within_budget(blame_answer(self.store(), path, limit), "results", maxTokens)

    @tool
    def why_commit(
        self,
        commit: Annotated[str, Field(description="a commit hash, or its first digits (4 or more)")],
        maxTokens: MaxTokens = DEFAULT_MAX_TOKENS,
    ) -> dict:
        """The session whose turns made or showed a commit, else the turns that name it."""
        return within_budget(why_answer(self.store(), commit), "results", maxTokens)


def summary_result(row: dict, score: float | None = None, matches=(), full: bool = False) -> dict:
    """A session's account (`session_accounts`: its ok summary, else its card) in the Memory Core's
    shape (`Summary`), with its provenance: a card's `sourceTier` is `facts`."""
    result = {
        "id": f"summary_{row['session_id']}",
        "sessionId": row["session_id"],
        "timestamp": iso(row.get("session_last_ms", row.get("last_activity_ms"))),
        "project": row.get("project"),
        "title": row["title"],
        # A line by default: the session's card line past the title; `full`: its account's text.
        "summary": cut(row["summary"], RESULT_FIELD_CHARS * 2) if full else _after_title(row),
        "category": row["category"],
        "memoryCount": row["memory_count"],
        "quality": row["quality"],
        "productivity": row["productivity"],
        "impact": row["impact"],
        "complexity": row["complexity"],
        "technologies": list(row["technologies"] or []),
        "sourceTier": row["source_tier"],
        "degraded": bool(row["degraded"]),
        "verdict": row["verdict"],
        "navigationIndex": bool(row["degraded"]),
        "origin": row["origin"],
        "model": row["model"] or None,
        "account": row["account"],
    }
    if score is not None:
        result["relevanceScore"] = round(score, 4)
        result["matches"] = [
            {"cite": cite(row["session_id"], m.turn_id), "snippet": short(m.snippet)}
            for m in matches[:TURNS_PER_SESSION]
        ]
    if full:
        return result
    if row["account"] == "card":  # a card's provenance is its tier's: degraded, a navigation summary
        del result["degraded"], result["navigationIndex"], result["origin"]
    return compact(result)


def memory(row: dict, limit: int) -> dict:
    """A turn in the Memory Core's shape (`Memory`), its texts cut to `limit` characters each (a page
    of `get_session_memories`, a `full` search result)."""
    return {
        "id": row["id"],
        "sessionId": row["session_id"],
        "timestamp": iso(row["ts_ms"]),
        # A search index's row keeps each text's head and its whole length (`prompt_chars`).
        "prompt": cut(row["prompt"], limit, row.get("prompt_chars")),
        "thought": cut(row["thought"], limit, row.get("thought_chars")),
        "response": cut(row["response"], limit, row.get("response_chars")),
        "type": row["type"],
        "agent": row["agent"],
        "model": row["model"],
        "amountToolCalls": row["amount_tool_calls"],
        "toolsUsed": _tools(row["tools_used"]),
    }


def build_server(db_path: Path, embedder=None):
    """The MCP server over the store file at `db_path`, each of `Tools`' tools registered, read-only;
    `embedder`: the embeddings host's client, whose vectors the two queries fuse with keywords."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    tools = Tools(db_path, embedder)
    server = MCPServer(
        "session-digest",
        instructions=(
            "Past AI-agent work sessions, summarized: find sessions by words, names, paths and errors "
            "(query_summaries, query_raw_memories), list them (get_all_summaries), read one's turns "
            "(get_session_memories), or find the sessions that touched a file (find_sessions_by_file). "
            "A summary with navigationIndex true is degraded: an index of the session. A session with no "
            "summary worth reading is told by its card (sourceTier facts): its asks, files, commands, errors, "
            "commits and outcome, from its own log, each with its turn."
        ),
    )
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    for name in TOOL_NAMES:
        server.tool(annotations=read_only, structured_output=False)(getattr(tools, name))
    refuse_unknown_arguments(server)
    return server


def refuse_unknown_arguments(server) -> None:
    """A tool called with an argument it does not take answers with an error naming the ones it
    takes (the SDK would drop it silently: a misspelt `nresults` would change nothing, unseen). The
    SDK keeps each tool's argument model on its tool manager; each is replaced by one that checks."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        known = tuple(field.alias or name for name, field in model.model_fields.items())

        class Checked(model):
            @model_validator(mode="before")
            @classmethod
            def _known_only(cls, data, name=tool.name, known=known):
                unknown = sorted(set(data) - set(known)) if isinstance(data, dict) else []
                if unknown:
                    raise ValueError(
                        f"{name} takes no {', '.join(map(repr, unknown))}: its arguments are {', '.join(known)}"
                    )
                return data

        tool.fn_metadata.arg_model = Checked


def serve(db_path: Path, embedder=None) -> None:
    """Serve over stdio until the client closes it."""
    build_server(db_path, embedder).run("stdio")


def _after_title(row: dict) -> str | None:
    """The card line without the title it opens with (the result names it already)."""
    line = short(row["line"] or row["summary"], LINE_CHARS)
    for head in (f"Asked: {row['title']}", row["title"]):
        if line and head and line.startswith(head):
            return line[len(head) :].lstrip(". ") or None
    return line


def _why(source, answer: dict, wanted: int, **filters) -> dict:
    """An answer with fewer results than asked says why (`why`): an empty store, sessions not indexed
    yet, the filters it was asked with. Over the search index, the store's figures are its last
    refresh's."""
    results = answer.get("results", answer.get("summaries"))
    if len(results) >= wanted:
        return answer
    sessions, behind = index_figures(source)
    reasons = []
    if not sessions:
        reasons.append("no sessions in the store yet: `session-digest ingest PATH` adds some")
    elif "results" in answer and behind:
        reasons.append(
            f"{behind} of {sessions} sessions are not indexed yet (an ingest, a sweep or a search indexes them)"
        )
    named = {k: v for k, v in filters.items() if v is not None}
    if sessions and not results and named:
        reasons.append("nothing with " + ", ".join(f"{k} {v!r}" for k, v in named.items()))
    if sessions and not results and not reasons and "results" in answer:
        reasons.append("no session's turns or account hold these words")
    return {**answer, "why": "; ".join(reasons)} if reasons else answer


def _notice(found) -> dict:
    """Keyword and vector results fused say so; vectors configured and left out say why."""
    return {"mode": found.mode, **({"notice": found.notice} if found.notice else {})}
