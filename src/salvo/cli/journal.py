"""``salvo journal``: export a game from the referee's journal, replay one, back it up."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TextIO

import click

from salvo.cli.common import LocalFileError, SalvoError


@click.group()
def journal() -> None:
    """The referee's journal: export a game, replay one."""


@journal.command("export")
@click.argument("out", type=click.File("w"))
@click.option(
    "--state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default="salvo-referee.db",
    show_default=True,
    help="The referee's state file.",
)
@click.option("--arena", default="", help="Arena prefix (default: the unprefixed arena).")
@click.option("--game", "game_no", type=int, help="Game number (default: the latest).")
@click.option("--with-keys", is_flag=True, help="Keep the team keys (default: SHA-256 digests, enough to replay).")
def journal_export(out: TextIO, state: Path, arena: str, game_no: int | None, with_keys: bool) -> None:
    """Write one game's events as JSON lines (use - for stdout).

    The first line describes the game (arena, game number, seed, settings);
    every other line is an accepted event with its time. `salvo journal
    replay` plays it through the engine again.
    """
    from salvo.journaltools import export_game

    exported = export_game(state, out, arena, game_no, with_keys=with_keys)
    click.echo(exported.line(), err=True)


@journal.command("backup")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default="salvo-referee.db",
    show_default=True,
    help="The referee's state file (a referee may be running on it).",
)
def journal_backup(out: Path, state: Path) -> None:
    """Copy the state file, consistent, while a referee runs on it.

    A plain copy of the .db file is not a backup: SQLite keeps the latest
    commits in its -wal file, and the referee its newest events in -spool
    until they are settled. This copies the database with SQLite's online
    backup (commits in the WAL included) and the spool beside it (OUT-spool);
    a referee started on OUT takes that spool in.
    """
    from salvo.store import backup

    try:
        events = backup(state, out)
    except (OSError, sqlite3.Error) as exc:
        raise LocalFileError(f"cannot back up {state} to {out}: {exc}") from None
    click.echo(f"backed up {state} to {out} ({events} events)")


@journal.command("replay")
@click.argument("source", type=click.File("r"))
def journal_replay(source: TextIO) -> None:
    """Play an exported game through the engine and print how it went.

    Exits 1 if the engine rejects any journaled event (the journal does not
    match the rules).
    """
    from salvo.journaltools import replay

    replayed = replay(source)
    for event, reason in replayed.rejected:
        click.echo(f"rejected: {event} ({reason})")
    click.echo(replayed.line())
    for topic, payload in replayed.stats():
        click.echo(f"{topic} {payload}")
    if replayed.rejected:
        raise SalvoError(f"{len(replayed.rejected)} journaled events no longer apply")
