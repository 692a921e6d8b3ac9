"""The plain JSONL turn format for other harnesses: one turn per line (docs/ingest.md)."""

from __future__ import annotations

from digest.readers.common import required_id, text_field, timestamp, turn_row
from digest.readers.neo import tool_calls_count


def parse_simple_turn(obj: dict, source: str, line_no: int) -> tuple[dict, str | None]:
    """The simple turn format → a `turns` row and the turn's mini summary, if it carries one."""
    turn_id = required_id(obj, "id", "", "missing-id")
    session_id = required_id(obj, "session_id", "", "missing-session-id")
    prompt, response = text_field(obj, "prompt", ""), text_field(obj, "response", "")
    row = turn_row(
        turn_id=turn_id,
        session_id=session_id,
        ts_ms=timestamp(obj.get("timestamp"), ""),
        kind="agent-interaction",
        prompt=prompt,
        thought=text_field(obj, "thought", "") or "",
        response=response,
        document=text_field(obj, "document", ""),
        meta_get=lambda key: (
            text_field(obj, {"agentIdentity": "agent_identity", "userId": "user_id"}.get(key, key), "") or None
        ),
        source=source,
        line_no=line_no,
        required=("prompt", "response"),  # thought is optional in this format
    )
    row["amount_tool_calls"] = tool_calls_count(obj.get("tool_calls"))
    row["embedding"] = None  # the format has none
    mini = text_field(obj, "mini_summary", "")
    return row, (mini.strip() or None) if mini else None
