"""A session's project (the working directory or repository root its harness recorded), and how a
`--project` filter names one: the whole path, or its last component(s) (`app`, `src/app`)."""

from __future__ import annotations

import re

_DRIVE = re.compile(r"^[A-Za-z]:$")


def _parts(path: str) -> list[str]:
    return [part for part in path.replace("\\", "/").split("/") if part]


def project_matches(project: str | None, wanted: str) -> bool:
    """Whether `project` is the one `wanted` names: an absolute path must be the whole path, any
    other its last components (a trailing slash, and `\\` for `/`, make no difference)."""
    if not project:
        return False
    have, want = _parts(project), _parts(wanted)
    if not want:
        return False
    whole = wanted.replace("\\", "/").startswith("/") or bool(_DRIVE.match(want[0]))
    if whole:
        return have == want
    return have[-len(want) :] == want


def matching_projects(projects: list[str], wanted: str) -> list[str]:
    """The projects of `projects` that `wanted` names, in order."""
    return [p for p in projects if project_matches(p, wanted)]


def project_keys(project: str | None) -> list[str]:
    """The keys a search index finds a project by: its whole path (`/` first) and its last
    components, so that `project_matches` holds exactly when `wanted_project_key` is one of them."""
    have = _parts(project or "")
    if not have:
        return []
    return ["/" + "/".join(have)] + ["/".join(have[-n:]) for n in range(1, len(have) + 1)]


def wanted_project_key(wanted: str) -> str | None:
    """The key a `--project` filter looks a project up by (None: it names none)."""
    want = _parts(wanted)
    if not want:
        return None
    whole = wanted.replace("\\", "/").startswith("/") or bool(_DRIVE.match(want[0]))
    return ("/" if whole else "") + "/".join(want)
