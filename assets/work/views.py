"""What the session assets show on a partition, in plain values: a Markdown entry is a `Markdown`, a
JSON one a dict, which `assets.sessions.view_metadata` hands to Dagster. The ingest's report for
`raw_turns`; a session's facts, card and place beside its summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from assets.summary_view import TURN_IDS_SHOWN, Markdown
from digest.facts import facts_markdown
from digest.ingest import FileReport, IngestReport

if TYPE_CHECKING:
    from assets.work.sessions import SummaryOutcome
    from resources.store import DigestStore


def ingest_view(report: IngestReport, new_partitions: int) -> dict:
    """An ingest's run as `raw_turns` records it: its counts, and a row per file read."""
    table = "\n".join(
        f"| `{f.path}` | {f.kind} | {read_how(f)} | {f.lines} | {f.rows} | {f.rejects} | {f.superseded} | {f.skipped} "
        f"| {f.folded} | {sum(f.redactions.values())} |"
        for f in report.files
    )
    problems = report.vector_problems()
    return {
        "files": len(report.files),
        "turns": report.turns,
        "rejects": report.rejects,
        "superseded": report.superseded,
        # Embeddings kept (archives write them back), and malformed ones dropped with where and why.
        "vectors": report.vectors,
        "vectors_dropped": report.vectors_dropped,
        **({"vector_problems": Markdown("\n".join(f"- {p}" for p in problems))} if problems else {}),
        # Secrets replaced before anything was stored (`digest.redact`; DIGEST_REDACT=off: none).
        "redactions": sum(report.redactions.values()),
        "redactions_by_kind": dict(sorted(report.redactions.items())),
        "sessions_redacted": len(report.redacted_sessions),
        **(
            {"redactions_by_session": Markdown(redactions_table(report.redacted_sessions))}
            if report.redacted_sessions
            else {}
        ),
        # Files the folders' walk passed over, by reason (too deep, a symlink out of the tree, not
        # a log by name or content, empty, unreadable), and files unchanged since their last read.
        "files_unchanged": report.unchanged,
        "skipped": report.skipped,
        **({"skipped_examples": report.skipped_examples} if report.skipped_examples else {}),
        "sessions_touched": len(report.sessions),
        "sessions_emptied": len(report.emptied),
        "new_partitions": new_partitions,
        "files_preview": Markdown(
            "| file | kind | read | lines | rows | rejects | superseded | skipped | folded | redacted |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + table
            if table
            else "no files"
        ),
    }


def redactions_table(by_session: dict[str, int]) -> str:
    """The sessions whose turns had secrets replaced, most first (the first `TURN_IDS_SHOWN`)."""
    ranked = sorted(by_session.items(), key=lambda item: (-item[1], item[0]))
    more = f"\n\n… and {len(ranked) - TURN_IDS_SHOWN} more" if len(ranked) > TURN_IDS_SHOWN else ""
    return (
        "| session | secrets |\n|---|---|\n" + "\n".join(f"| `{s}` | {n} |" for s, n in ranked[:TURN_IDS_SHOWN]) + more
    )


def read_how(report: FileReport) -> str:
    """How the ingest read the file: whole (new, or why again), or its appended lines from line N."""
    return f"appended from line {report.from_line}" if report.read == "appended" else report.read


def facts_view(db: DigestStore, session_id: str) -> dict:
    """What the session's tool calls did, read at ingest with no model call (`digest.facts`): the
    files edited or created, the commands with their exit status, the errors; and its card."""
    facts = db.facts.for_session(session_id)
    card = db.cards.card(session_id)
    return {
        "facts": Markdown(facts_markdown((f["kind"], f["value"], f["detail"]) for f in facts)),
        # The session told from those facts, no model call: its account while no ok summary is.
        **({"card": Markdown(card.markdown())} if card else {}),
    }


def place_view(db: DigestStore, session_id: str) -> dict:
    """Where the session ran (`unknown`: its log does not say), as its `sessions` row has it."""
    rows = db.sessions.session_rows([session_id])
    return {k: (rows[0][k] if rows else None) or "unknown" for k in ("project", "git_branch")}


def made_summary_view(db: DigestStore, outcome: SummaryOutcome) -> dict:
    """The session's facts, card and place beside a summary its run made and stored; nothing else."""
    if outcome.row is None or outcome.failure or outcome.skipped or outcome.kept:
        return {}
    return {**facts_view(db, outcome.session_id), **place_view(db, outcome.session_id)}
