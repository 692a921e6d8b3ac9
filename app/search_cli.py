"""`session-digest search`, `show` and `mcp`: past work found again, for people (a ranked list,
a session's summary with its provenance, its facts and its turns) and for agents (`mcp`, the MCP
server of `app/mcp_server.py`). Registered in `app/cli.py`.

Bad input (an empty or all-stop-word query, one longer than a page, an unknown session, a `--since`
that is no date) is one line on stderr and exit code 2, never a traceback. `search` reads the search
index beside the store (`resources.store.search_reads`) and never opens the store, so it answers
while a sweep or an ingest writes: those bring the index up to date, as the search sensor does. With
no index yet it builds one from the store first. Only what a search needs is imported at the top."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from rich.text import Text

from app.command import Command
from app.console import Output

if TYPE_CHECKING:
    from rich.console import Console

    from digest.settings import Settings

USAGE_ERROR = 2  # argparse's exit code for bad input, ours too
TEXT_SHOWN = 400  # characters of a turn's prompt and response `show --turns` prints (--json: all)
_RELATIVE = re.compile(r"^(\d{1,6})\s*([hdw])$")
_HOURS = {"h": 1, "d": 24, "w": 24 * 7}


class BadInput(ValueError):
    """A command line that asks for something that cannot be answered: its one-line reason."""


def search_arguments(command) -> None:
    command.add_argument("query", nargs="+", help="the words to find (no quotes needed)")
    command.add_argument("--limit", type=int, default=10, help="at most this many sessions (default 10)")
    command.add_argument("--since", metavar="DATE", help="active since: 2026-11-18, an ISO time, or 12h / 7d / 2w ago")
    command.add_argument("--category", help="bugfix, feature, refactoring, documentation, new-app, analysis, other")
    command.add_argument(
        "--file", metavar="PATH", help="sessions that read, edited or created this file (or path tail)"
    )
    command.add_argument("--project", help="sessions of this project")
    command.add_argument(
        "--full", action="store_true", help="with --json: every field of each hit, snippets whole (default: compact)"
    )


def show_arguments(command) -> None:
    command.add_argument("session", metavar="SESSION", help="session id or partition key")
    command.add_argument("--turns", action="store_true", help="list the session's turns too, oldest first, paged")
    command.add_argument("--offset", type=int, default=0, help="the first turn listed (0: the first)")
    command.add_argument("--limit", type=int, default=20, help="turns listed (default 20)")


def blame_arguments(command) -> None:
    command.add_argument("path", metavar="PATH", help="the file's path, or its tail (settings.py)")
    command.add_argument("--limit", type=int, default=10, help="at most this many sessions (default 10)")


def deferred_embedder(settings: Settings):
    """The configured embeddings' client, made (and its model loaded) at the first query that fuses;
    None when embeddings are off."""
    if settings.vector_model is None:
        return None
    from resources.hybrid_search import DeferredEmbedder

    def client():
        if settings.embed_provider == "embedded":  # in this process: no HTTP client to import
            from resources.model_clients.embedded_embeddings import embedded_client

            return embedded_client(settings.embed_model, settings.embed_threads)
        from resources.model_clients.embeddings import embedding_client

        return embedding_client(
            settings.embed_provider, settings.embed_url, settings.embed_model, settings.embed_threads
        )

    return DeferredEmbedder(settings.vector_model, client)


def why_arguments(command) -> None:
    command.add_argument("commit", metavar="COMMIT", help="a commit hash or its first digits (4 or more)")


def reported(answer):
    """`answer(settings, args, output)` as a command: bad input ends the process with its reason and
    exit code 2."""

    def run(args, settings: Settings, output: Output) -> None:
        from resources.store.search_reads import SearchError

        try:
            answer(settings, args, output)
        except (BadInput, SearchError, ValueError) as exc:
            print(f"session-digest {args.command}: {exc}", file=sys.stderr)
            raise SystemExit(USAGE_ERROR) from None

    return run


def mcp(args, settings: Settings, output: Output) -> None:
    from app.mcp_server import serve

    embedder = deferred_embedder(settings)
    # The server opens the store at the first tool that reads it (an older one migrated then): its
    # searches read the index alone, so `initialize` waits for no store.
    serve(settings.db_path, embedder)


# --- search -----------------------------------------------------------------------------------------


def since_ms(text: str, now: int) -> int:
    """Epoch ms of `--since`: an ISO date or time (UTC unless it says), or a span back from now."""
    value = text.strip()
    if match := _RELATIVE.match(value.lower()):
        return now - int(match.group(1)) * _HOURS[match.group(2)] * 3_600_000
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"--since {text!r} is not a date: give 2026-11-18, 2026-11-18T09:00, or 12h / 7d / 2w") from None
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return (parsed - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def refresh_index(store) -> str | None:
    """Index the sessions that changed since the last refresh (cheap when none did); why it could
    not, else None. A writer holding the file is waited out as by every command."""
    import duckdb

    try:
        store.search.refresh()
    except (duckdb.Error, OSError) as exc:
        return f"the search index was not brought up to date ({type(exc).__name__}: {exc}); answering from it as it is"
    return None


def search_source(settings: Settings):
    """The search index beside the store, read without the store's lock; built from the store first
    when there is none yet (a store from before it, its folder deleted), or the store itself when
    even that fails (its searches then find nothing and say why)."""
    from resources.store.search_index import IndexUnavailable
    from resources.store.search_reads import SearchIndex

    try:
        return SearchIndex(settings.db_path)
    except IndexUnavailable:
        pass
    from resources.store import open_store

    store = open_store(settings.db_path)
    if problem := refresh_index(store):
        print(f"session-digest search: {problem}", file=sys.stderr)
    try:
        return SearchIndex(settings.db_path)
    except IndexUnavailable:
        return store


def search(settings: Settings, args, output: Output) -> None:
    from resources.hybrid_search import search_sessions

    query = " ".join(args.query)
    from digest.scheduling import now_ms

    since = since_ms(args.since, now_ms()) if args.since else None
    source = search_source(settings)
    embedder = deferred_embedder(settings)  # made, and its model loaded, only once the vectors cover the search
    results = search_sessions(
        source, embedder, query, limit=args.limit, since_ms=since, category=args.category, file=args.file,
        project=args.project,
    )  # fmt: skip
    hits = results.hits
    if results.notice and (output.as_json or not hits):  # a text answer with hits says it last
        print(f"session-digest search: {results.notice}", file=sys.stderr)
    if output.as_json:
        print(
            search_json(source, query, hits, args, results.mode, results.notice)
            if not args.full
            else json.dumps([hit_json(h) for h in hits], indent=2, default=str)
        )
        return
    if not hits:
        output.out.print(no_hits(source, query, args), markup=False, highlight=False)
        return
    for rank, hit in enumerate(hits, 1):
        render_hit(output.out, rank, hit)
    if results.notice:
        output.out.print(f"note: {results.notice}", markup=False, highlight=False)


def hit_json(hit) -> dict:
    return {
        "session_id": hit.session_id, "score": round(hit.score, 4), "turn_ids": hit.turn_ids, "title": hit.title,
        "category": hit.category, "first_activity": iso(hit.first_activity_ms), "last_activity": iso(hit.last_activity_ms),
        "tier": hit.tier, "degraded": hit.degraded, "verdict": hit.verdict, "navigation_index": hit.navigation_index,
        "matches": [
            {"kind": m.kind, "turn_id": m.turn_id, "score": round(m.score, 4), "snippet": m.snippet} for m in hit.matches
        ],
    }  # fmt: skip


def search_json(source, query: str, hits, args, mode: str, notice: str | None = None) -> str:
    """`search --json`: compact JSON, each session by its card line with its one or two best matches
    cited (`session:turn`); an empty answer says why, and one without vectors (configured) why not."""
    from app.answers import LINE_CHARS, TURNS_PER_SESSION, accounts_of, cite, compact, dumps, short

    accounts = accounts_of(source, [h.session_id for h in hits])
    results = [
        compact(
            {
                "session_id": h.session_id,
                "line": short((accounts.get(h.session_id) or {}).get("line") or h.title, LINE_CHARS),
                "project": (accounts.get(h.session_id) or {}).get("project"),
                "last_activity": iso(h.last_activity_ms),
                "score": round(h.score, 4),
                "tier": h.tier,
                "matches": [
                    {"kind": m.kind, "cite": cite(h.session_id, m.turn_id), "snippet": short(m.snippet)}
                    for m in h.matches[:TURNS_PER_SESSION]
                ],
            }
        )
        for h in hits
    ]
    answer = {"query": query, "count": len(results), "mode": mode, "results": results}
    if notice:
        answer["notice"] = notice
    if not results:
        answer["why"] = no_hits(source, query, args)
    return dumps(answer)


def found_by_facts(settings: Settings, args, output: Output) -> None:
    """`blame PATH` and `why COMMIT`: sessions found by what their turns did, from their facts."""
    from app.answers import blame_answer, dumps, why_answer
    from resources.store import open_store

    if args.command == "blame":
        if args.limit < 1:
            raise BadInput("--limit must be 1 or more")
        answer = blame_answer(open_store(settings.db_path, read_only=True), args.path, args.limit)
    else:
        store = open_store(settings.db_path)
        # `why` falls back to the turns that name the commit: the search index, brought up to date.
        if problem := refresh_index(store):
            print(f"session-digest why: {problem}", file=sys.stderr)
        answer = why_answer(store, args.commit)
    if output.as_json:
        print(dumps(answer))
        return
    console = output.out
    if not answer["results"]:
        console.print(answer["why"], markup=False, highlight=False)
    for n, r in enumerate(answer["results"], 1):
        console.print(Text.assemble((f"{n:>2}. ", "bold"), (r.get("line") or r["sessionId"], "bold")), soft_wrap=True)
        head = [r["sessionId"], r.get("lastActivity") or r.get("when") or "", r.get("how", "")]
        console.print("    " + "  ".join(h for h in head if h), markup=False, highlight=False, style="dim")
        for label in ("changed", "commands", "commits", "commit", "cite", "snippet"):
            if value := r.get(label):
                shown = "; ".join(value) if isinstance(value, list) else value
                console.print(f"    {label}: {shown}", markup=False, highlight=False, soft_wrap=True)


def no_hits(source, query: str, args) -> str:
    """Why nothing was found, in a line: an empty store, else the query and the filters that found nothing."""
    from app.answers import index_figures

    if not index_figures(source)[0]:
        return "no sessions in the store yet: `session-digest ingest PATH` adds some"
    filters = [
        f"--{name} {value}" for name in ("since", "category", "file", "project") if (value := getattr(args, name))
    ]
    return f"no session matches {query!r}" + (f" with {' '.join(filters)}" if filters else "")


def iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _day(ms: int | None) -> str:
    return "no time" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def marked(snippet: str) -> Text:
    """A snippet's `**term**` marks as bold."""
    text = Text()
    for i, part in enumerate(snippet.split("**")):
        text.append(part, style="bold" if i % 2 else None)
    return text


def render_hit(console: Console, rank: int, hit) -> None:
    from digest.card import SOURCE_TIER

    title = hit.title or "(not summarized yet)"
    console.print(Text.assemble((f"{rank:>2}. ", "bold"), (title, "bold"), f"   score {hit.score:.2f}"))
    if hit.tier is None:
        summary_kind = ""
    elif hit.tier == SOURCE_TIER:
        summary_kind = "  card (from the session's own facts)"
    else:
        summary_kind = "  navigation index (a degraded summary)" if hit.navigation_index else f"  {hit.tier} summary"
    verdict = f", verdict {hit.verdict}" if hit.verdict else ""
    console.print(
        f"    {hit.session_id}  {_day(hit.last_activity_ms)}{summary_kind}{verdict}"
        + (f"  {hit.category}" if hit.category else ""),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for match in hit.matches:
        where = match.kind if match.kind in ("summary", "card") else f"{match.kind} {match.turn_id}"
        console.print(Text("    ") + Text(f"{where}: ", style="dim") + marked(match.snippet), soft_wrap=True)
    if hit.turn_ids:
        console.print(
            f"    turns: {' '.join(hit.turn_ids)}", markup=False, highlight=False, style="dim", soft_wrap=True
        )
    console.print()


# --- show -------------------------------------------------------------------------------------------

_PROVENANCE = (
    "source_tier", "degraded", "route_reason", "verdict", "fidelity", "model", "host", "origin", "code_version",
    "created_at", "run_id",
)  # fmt: skip


def show(settings: Settings, args, output: Output) -> None:
    from resources.store import open_store

    if args.offset < 0 or args.limit < 1:
        raise BadInput("--offset must be 0 or more and --limit 1 or more")
    store = open_store(settings.db_path, read_only=True)
    try:
        (session_id,) = store.sessions.resolve_sessions([args.session])
    except ValueError as exc:
        raise BadInput(f"{exc} (a session id or partition key; `session-digest search` finds one)") from None
    result = session_view(store, session_id, args.offset if args.turns else None, args.limit)
    if output.as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    render_session(output.out, result)


def session_view(store, session_id: str, offset: int | None, limit: int) -> dict:
    """A session as `show` gives it: its row, its summary with provenance (None: not summarized), its
    facts, and (`offset` given) a page of its turns."""
    (session,) = store.sessions.session_rows([session_id])
    row = store.summaries.summary_row(session_id)
    summary = None
    if row is not None:
        covered = row.get("covered_turn_ids")
        summary = {
            "title": row["title"], "summary": row["summary"], "category": row["category"],
            "technologies": row["technologies"], **{k: row[k] for k in _PROVENANCE},
            "covered_turns": None if covered is None else len(covered),
            "covered_turn_ids": covered, "mini_turn_ids": row.get("mini_turn_ids"),
        }  # fmt: skip
    view = {
        "session_id": session_id,
        "partition_key": session["partition_key"],
        "turn_count": session["turn_count"],
        "first_activity": iso(session["first_activity_ms"]),
        "last_activity": iso(session["last_activity_ms"]),
        # Where the work happened and which log it was read from (its latest turn's that says).
        "project": session["project"],
        "git_branch": session["git_branch"],
        "source_path": session["source_path"],
        "summary": summary,
        # The session's account: its leading summary, else its card (made from its facts, no model call).
        "account": (store.cards.accounts([session_id]).get(session_id) or {}).get("account", "card"),
        "card": card_view(store.cards.card(session_id)),
        "facts": [
            {"turn_id": f["turn_id"], "kind": f["kind"], "value": f["value"], "detail": f["detail"]}
            for f in store.facts.for_session(session_id)
        ],
    }
    if offset is not None:
        total, turns = store.sessions.turn_page(session_id, offset, limit)
        view["turns"] = {"total": total, "offset": offset, "limit": limit, "items": turns}
    return view


def card_view(card) -> dict | None:
    """A card as `show --json` gives it: its items with their turns, its line and its text."""
    from digest.card import SOURCE_TIER

    if card is None:
        return None
    return {**dataclasses.asdict(card), "source_tier": SOURCE_TIER, "line": card.line(), "text": card.text()}


def render_session(console: Console, view: dict) -> None:
    from rich.markdown import Markdown

    from digest.facts import facts_markdown

    summary, card = view["summary"], view["card"]
    told = summary["title"] if view["account"] == "summary" else card["title"] if card else "(no card yet)"
    console.print(Text(told, style="bold"))
    console.print(
        f"{view['session_id']}  partition {view['partition_key']}  {view['turn_count']} turns  "
        f"{view['first_activity'] or 'no time'} → {view['last_activity'] or 'no time'}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    place = view["project"] and f"project {view['project']}" + (
        f" (branch {view['git_branch']})" if view["git_branch"] else ""
    )
    read_from = view["source_path"] and f"read from {view['source_path']}"
    if place or read_from:
        console.print("  ".join(p for p in (place, read_from) if p), markup=False, highlight=False, soft_wrap=True)
    if card:
        console.print()
        console.print(
            Text("Card", style="bold") + Text(" (from the session's own facts, no model call; [#N] is the turn)")
        )
        console.print(card["text"].split("\n", 2)[-1], markup=False, highlight=False)
    if summary and summary["verdict"] != "ok":
        console.print()
        console.print(
            f"Model summary: judged {summary['verdict'] or 'not judged'}, not shown (--json has it)",
            markup=False, highlight=False,
        )  # fmt: skip
    elif summary:
        console.print()
        if view["account"] == "card":
            console.print(
                f"Model summary by {summary['model']}, beside the card: this model's summaries never lead an account",
                markup=False, highlight=False,
            )  # fmt: skip
        console.print(summary["summary"], markup=False, highlight=False)
        console.print()
        tier = summary["source_tier"] + (" (degraded: a navigation index)" if summary["degraded"] else "")
        fidelity = "none" if summary["fidelity"] is None else f"{summary['fidelity']:.2f}"
        covered = (
            "not recorded"
            if summary["covered_turns"] is None
            else f"{summary['covered_turns']} of {view['turn_count']}"
        )
        if summary["mini_turn_ids"]:
            covered += f" ({len(summary['mini_turn_ids'])} by their mini summary)"
        for name, value in (
            ("tier", tier), ("route", summary["route_reason"]), ("verdict", summary["verdict"] or "not judged"),
            ("fidelity", fidelity), ("model", summary["model"] or "none"), ("host", summary["host"] or "none"),
            ("origin", summary["origin"]), ("made", f"{summary['created_at']} by run {summary['run_id'] or 'none'}"),
            ("covered turns", covered),
        ):  # fmt: skip
            console.print(Text.assemble((f"{name:>14}  ", "bold"), str(value)))
    if not card:  # the card lists them, each with its turn
        console.print()
        facts = [(f["kind"], f["value"], f["detail"]) for f in view["facts"]]
        console.print(Markdown(facts_markdown(facts)))
    if "turns" not in view:
        return
    page = view["turns"]
    console.print()
    shown_to = page["offset"] + len(page["items"])
    console.print(
        Text(f"Turns {page['offset'] + 1}–{shown_to} of {page['total']}", style="bold")
        if page["items"]
        else Text(f"No turns from {page['offset']} (the session has {page['total']})", style="bold")
    )
    for n, turn in enumerate(page["items"], page["offset"] + 1):
        console.print(Text.assemble((f"[{n}] ", "bold"), f"{turn['id']}  {_day(turn['ts_ms'])}", style="dim"))
        for field in ("prompt", "response"):
            text = (turn[field] or "").strip()
            if text:
                cut = text[:TEXT_SHOWN] + (
                    f" … ({len(text):,} characters; --json has all)" if len(text) > TEXT_SHOWN else ""
                )
                console.print(Text(f"  {field}: ", style="bold") + Text(cut))
    if shown_to < page["total"]:
        console.print(f"… next page: --offset {shown_to}", markup=False, highlight=False, style="dim")


COMMANDS = (
    Command(
        "search", "find past sessions by words, names, paths and errors: ranked, with their best turns",
        reported(search), search_arguments, light=True,
    ),
    Command(
        "show", "a session's summary with its provenance, its facts, and its turns (--turns)", reported(show),
        show_arguments,
    ),
    Command(
        "blame", "the sessions that edited or created a file, newest first, with their commands and commits",
        reported(found_by_facts), blame_arguments,
    ),
    Command(
        "why", "the session whose turns made, showed or named a commit", reported(found_by_facts), why_arguments
    ),
    Command(
        "mcp", "serve the store to agents over MCP (stdio), read-only: Memory Core's query tools", mcp, light=True,
        takes_json=False,
    ),
)  # fmt: skip
