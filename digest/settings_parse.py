"""How a setting's text is read and what one setting is: its env var, field, parser, default, doc.

A parser takes (env var, stripped non-empty text) and returns the value, or raises `SettingsError`
naming the variable and the reason. `digest.settings.SETTINGS` is built from these.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from digest.hosts import DEFAULT_RAW_CAP_TOKENS, MAX_CONTEXT_TOKENS


class SettingsError(ValueError):
    """A setting's env var holds a value that cannot be used."""


Parse = Callable[[str, str], Any]


def whole(minimum: int = 1, maximum: int = 2**31 - 1) -> Parse:
    """A whole number in [minimum, maximum]: by default what the store's INT32 columns hold."""

    def parse(name: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise SettingsError(f"{name}={text!r} is not a whole number") from None
        if value < minimum:
            raise SettingsError(f"{name}={text!r} must be at least {minimum}")
        if value > maximum:
            raise SettingsError(f"{name}={text!r} must be at most {maximum}")
        return value

    return parse


def _number(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a number") from None


def positive(name: str, text: str) -> float:
    value = _number(name, text)
    if not value > 0 or value == float("inf"):
        raise SettingsError(f"{name}={text!r} must be a positive finite number")
    return value


def share(name: str, text: str) -> float:
    value = _number(name, text)
    if not 0 <= value <= 1:
        raise SettingsError(f"{name}={text!r} must be a share from 0 to 1")
    return value


def on_off(name: str, text: str) -> bool:
    text = text.lower()
    if text not in ("on", "off"):
        raise SettingsError(f"{name}={text!r} is neither 'on' nor 'off'")
    return text == "on"


def one_of(choices: tuple[str, ...]) -> Parse:
    def parse(name: str, text: str) -> str:
        text = text.lower()
        if text not in choices:
            raise SettingsError(f"{name}={text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def raw_cap(name: str, text: str) -> int | None:
    """A positive token count, `off` (no cap), or `auto` (the default cap until the host's speed
    is measured; `raw_cap_auto` says it follows the speed then)."""
    if text.lower() == "off":
        return None
    if text.lower() == "auto":
        return DEFAULT_RAW_CAP_TOKENS
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is neither a whole number of tokens, 'off' nor 'auto'") from None
    if value < 1:
        raise SettingsError(f"{name}={text!r} must be at least 1 (or 'off')")
    if value > MAX_CONTEXT_TOKENS:
        raise SettingsError(f"{name}={text!r} must be at most {MAX_CONTEXT_TOKENS} (or 'off')")
    return value


def is_auto(name: str, text: str) -> bool:
    """Whether a raw cap's text asks the cap to follow the host (`auto`); `raw_cap` validates it."""
    return text.lower() == "auto"


def text(name: str, value: str) -> str:
    return value


def watch_list(name: str, value: str) -> str:
    """A list of folders separated by `os.pathsep`, kept as written (`digest.walk.watch_folders`
    reads it, expanding `~` and variables where it is used); one that names no folder is refused."""
    if not [part for part in value.split(os.pathsep) if part.strip()]:
        raise SettingsError(f"{name}={value!r} names no folder (separate folders with {os.pathsep!r})")
    return value


def path(name: str, value: str) -> Path:
    return Path(value).resolve()


def postgres_url(name: str, value: str) -> str:
    """A PostgreSQL URL whose driver is installed, checked as Dagster will open it (SQLAlchemy).
    The value is shown with its password masked."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except ArgumentError:
        raise SettingsError(f"{name} is not a URL (postgresql+psycopg2://user:password@host:5432/db)") from None
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() != "postgresql":
        raise SettingsError(f"{name}={shown!r} is not a PostgreSQL URL (postgresql+psycopg2://...)")
    try:
        url.get_dialect().import_dbapi()
    except ImportError as exc:
        # SQLAlchemy 2.1 opens a bare postgresql:// with psycopg (3); the project installs psycopg2.
        raise SettingsError(
            f"{name}={shown!r}: its driver is not installed ({exc}); write postgresql+psycopg2://..."
        ) from None
    return value


@dataclass(frozen=True)
class Setting:
    env: str
    field: str  # the field of `Settings`, or of its policy `policy`; a resource field it configures too
    parse: Parse
    default: Any  # a value, or a function of the top-level settings read before it (by field)
    doc: str  # markdown: docs/settings.md's table and the UI's Resources page show it
    policy: str | None = None  # "sweep" | "mini_summaries" | "graph" | "circuit": the `Settings` field it is part of
    default_doc: str | None = None  # the default in words, where the value alone does not say it

    def read(self, env: Mapping[str, str], known: Mapping[str, Any]) -> Any:
        raw = env.get(self.env, "").strip()
        if raw:
            return self.parse(self.env, raw)
        return self.default(known) if callable(self.default) else self.default

    @property
    def shown_default(self) -> str:
        """The default as docs/settings.md shows it."""
        if self.default_doc is not None:
            return self.default_doc
        if callable(self.default):
            raise ValueError(f"{self.env}: a computed default needs its default_doc")
        if isinstance(self.default, bool):
            return "`on`" if self.default else "`off`"
        if isinstance(self.default, str):
            return f"`{self.default}`"
        return "none" if self.default is None else f"{self.default:g}"
