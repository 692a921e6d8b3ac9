"""One `session-digest` command as the CLI registers it (`app.cli.COMMANDS`): its name and help, its
arguments, what it runs, and how it runs (light, stoppable, `--json`)."""

from __future__ import annotations

from argparse import ArgumentParser, Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.console import Output
    from digest.settings import Settings


class UsageError(ValueError):
    """A command line whose options do not go together: reported as argparse reports its own."""


def no_arguments(parser: ArgumentParser) -> None:
    """The arguments of a command that takes none."""


@dataclass(frozen=True)
class Command:
    """A subcommand: `arguments` adds its options to its parser, `run` does its work."""

    name: str
    help: str
    # The command's work: its result, printed as a table or JSON, or None when it printed its own.
    run: Callable[[Namespace, Settings, Output], dict | None]
    arguments: Callable[[ArgumentParser], None] = no_arguments
    # Starts no Dagster run: no instance to prepare, and only what it needs imported.
    light: bool = False
    # Launches model runs one after another: a signal stops it between runs.
    stoppable: bool = False
    takes_json: bool = True
