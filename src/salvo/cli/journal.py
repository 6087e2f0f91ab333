"""``salvo journal``: list the games of the referee's journal, export one,
replay one, back it up."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from salvo.cli.common import CommandFailed, LocalFileError

if TYPE_CHECKING:
    from salvo.organiser.journaltools import GameSummary


@click.group()
def journal() -> None:
    """The referee's journal: list its games, export one, replay one."""


@contextlib.contextmanager
def reading(state: Path) -> Iterator[None]:
    """A state file that cannot be read (damaged, not SQLite, no access) exits 4, in one line."""
    try:
        yield
    except sqlite3.Error as exc:
        raise LocalFileError(f"cannot read the state file {state}: {exc}") from None
    except OSError as exc:  # StoreDamaged says which file and what is wrong with it
        raise LocalFileError(str(exc)) from None


@journal.command("list")
@click.option(
    "--state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default="salvo-referee.db",
    show_default=True,
    help="The referee's state file (a referee may be running on it).",
)
@click.option("--arena", default=None, help='Only this arena (its prefix; "" is the unprefixed one). Default: all.')
@click.option("--json", "as_json", is_flag=True, help="One JSON object per game (see journaltools.GameSummary).")
def journal_list(state: Path, arena: str | None, as_json: bool) -> None:
    """Every game in the journal and what it came to, one line each.

    Arena, game number, the start of its id, when it started (local time,
    month-day hours:minutes), how long it lasted, turns, winner, how it ended
    (victory, forfeit, draw; abandoned, lobby closed; in progress, lobby) and
    its players in play order. A referee may be running on the state file.
    """
    from salvo.arena.journal import Store
    from salvo.organiser.journaltools import games

    with reading(state):
        store = Store(state, writer=False)
        try:
            arenas = store.arenas() if arena is None else [arena]
            summaries = [s for a in arenas for s in games(store, a)]
        finally:
            store.close()
    if as_json:
        for s in summaries:
            click.echo(json.dumps(s.as_json()))
    elif summaries:
        for line in table(summaries):
            click.echo(line)
    else:
        where = "" if arena is None else f" of arena {arena or '(default)'}"
        click.echo(f"no games{where} in {state}")


def _clock(at: float | None) -> str:
    return "-" if at is None else time.strftime("%m-%d %H:%M", time.localtime(at))


def _lasted(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s // 60 % 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def table(summaries: Sequence[GameSummary]) -> list[str]:
    """One aligned line per game under a heading; players last, so that a
    long lobby only makes its own line longer."""
    head = ("ARENA", "GAME", "ID", "STARTED", "LASTED", "TURNS", "WINNER", "END", "PLAYERS")
    rows = [head] + [
        (
            s.arena or "(default)",
            str(s.game_no),
            s.game_id[:8],
            _clock(s.started),
            _lasted(s.duration_s),
            str(s.turns),
            s.winner or "-",
            s.termination,
            ",".join(s.players) or "-",
        )
        for s in summaries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    numbers = {1, 4, 5}

    def line(row: tuple[str, ...]) -> str:
        cells = [c.rjust(w) if i in numbers else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        return "  ".join([*cells, row[-1]])

    return [line(row) for row in rows]


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
@click.option(
    "--record",
    is_flag=True,
    help="Write the game record instead (/game/record: fleets, every salvo, the result), as the referee published it.",
)
def journal_export(out: TextIO, state: Path, arena: str, game_no: int | None, with_keys: bool, record: bool) -> None:
    """Write one game's events as JSON lines (use - for stdout).

    The first line describes the game (arena, game number, seed, settings);
    every other line is an accepted event with its time. `salvo journal
    replay` plays it through the engine again. With --record: the game
    record of a game that is over, one JSON object, byte for byte what the
    referee published on /game/record (for replay viewers and analysis).
    """
    from salvo.organiser.journaltools import export_game, export_record

    with reading(state):
        if record:
            if with_keys:
                raise click.UsageError("--with-keys is for an export of events, not of the record")
            exported = export_record(state, out, arena, game_no)
        else:
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
    from salvo.arena.statefile import backup

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
    from salvo.organiser.journaltools import replay

    replayed = replay(source)
    for event, reason in replayed.rejected:
        click.echo(f"rejected: {event} ({reason})")
    click.echo(replayed.line())
    for topic, payload in replayed.stats():
        click.echo(f"{topic} {payload}")
    if replayed.rejected:
        raise CommandFailed(f"{len(replayed.rejected)} journaled events no longer apply")
