"""Who may see a summary in the original: the `userId` the archive and the graph stamp on it."""

from __future__ import annotations

import re
from collections.abc import Iterable

# The original's core swarm (`RequestContextService.CORE_SWARM_USER_IDS`): a summary any of them
# took part in is shared.
CORE_SWARM_USER_IDS = frozenset({"neo-opus-ada", "neo-opus-grace", "neo-opus-vega", "neo-gemini-pro", "neo-gpt"})
SHARED_USER_ID = "shared"
_AGENT_WRAPPER = re.compile(r"\s*\(.*?\)\s*")


def normalize_user_id(value: str | None) -> str | None:
    """`normalizeUserId`: one leading `@` stripped (an identity node id to a userId)."""
    return value[1:] if value and value.startswith("@") else value


def summary_user_id(participating_agents: Iterable[str] | None) -> str | None:
    """`resolveSummaryVisibilityUserId` with no request user (ours is never one, as offline):
    `shared` when a core swarm agent took part (`parseAgentList`: ` (…)` wrappers like
    ` (Antigravity)` dropped, lower-cased, one `@` stripped), else none, so the summary is visible
    to every tenant."""
    agents = {normalize_user_id(_AGENT_WRAPPER.sub("", a.strip()).lower()) for a in participating_agents or []}
    return SHARED_USER_ID if agents & CORE_SWARM_USER_IDS else None
