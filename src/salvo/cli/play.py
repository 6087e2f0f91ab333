"""Watching: ``salvo demo``, ``salvo spectate``, ``salvo replay`` (a team's ``salvo bot`` is :mod:`salvo.cli.bot`)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from salvo.cli.common import (
    BrokerRefused,
    CommandFailed,
    LocalFileError,
    broker_option,
    log_level_option,
    parse_broker,
    setup_logging,
)

if TYPE_CHECKING:
    from salvo.net.mqtt import Broker
    from salvo.web.spectate import SpectatorServer


@click.command()
@click.option("--bots", type=click.IntRange(2, 8), default=4, show_default=True, help="How many bots play.")
@click.option("--games", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--broker",
    envvar="SALVO_BROKER",
    help="Play on this broker instead of an embedded one (its account must be allowed everything).",
)
@click.option("--username", envvar="SALVO_USERNAME")
@click.option("--password", envvar="SALVO_PASSWORD")
@click.option("--prefix", default="demo", show_default=True, help="Arena prefix of the demo game.")
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=0.2,
    show_default=True,
    help="Seconds each bot thinks before a salvo, so you can follow.",
)
@click.option("--turn-timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True)
@click.option("--seed", type=int, help="Seed for strategies and the first player.")
def demo(
    bots: int,
    games: int,
    broker: str | None,
    username: str | None,
    password: str | None,
    prefix: str,
    delay: float,
    turn_timeout: float,
    seed: int | None,
) -> None:
    """Watch a complete game with nothing set up.

    Starts an embedded MQTT broker (unless --broker), the referee with short
    timeouts and bots with mixed strategies, and shows every board live as
    the referee sees it, then the winner and the stats.
    """
    from salvo.tools.demo import run_demo

    if broker is not None:
        parse_broker(broker, username, password)
    logging.getLogger("salvo").setLevel(logging.ERROR)  # the boards tell the story, not log lines
    try:
        result = run_demo(
            bots=bots,
            games=games,
            broker_url=broker,
            username=username,
            password=password,
            prefix=prefix,
            delay=delay,
            turn_timeout=turn_timeout,
            seed=seed,
        )
    except ConnectionError as exc:
        raise CommandFailed(str(exc)) from None
    for i, winner in enumerate(result.winners, 1):
        click.echo(f"game {i}: winner {winner or 'nobody'}")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on (0.0.0.0: the whole venue).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@broker_option
@log_level_option
def spectate(host: str, port: int, broker: str, username: str | None, password: str | None, log_level: str) -> None:
    """Serve the live spectator page: arenas, turns, hits, sinks, winners, standings.

    This server reads the public topics of every arena from the broker
    (anonymously unless --username) and streams them to browsers as
    server-sent events: browsers never talk to the broker, and the page
    needs nothing from the internet. Put it on the projector: one page shows
    every arena and the tournament table.
    """
    setup_logging(log_level)
    target = parse_broker(broker, username, password)
    server = _spectator_server(host, port, target)

    def ready() -> None:
        assert server.feed is not None
        server.feed.settled.wait(10)
        if server.feed.refused:
            raise BrokerRefused(server.feed.refused)
        click.echo(f"spectator page on {server.url} (broker: {target.url}); Ctrl-C stops")

    _serve_until_stopped(server, ready)


def _spectator_server(host: str, port: int, broker: Broker | None, **kw: Any) -> SpectatorServer:
    from salvo.web.spectate import SpectatorServer

    return SpectatorServer((host, port), broker, **kw)  # a busy port: ServeError, a failure the CLI reports


class _Terminated(Exception):
    """SIGTERM, raised in the main thread wherever it is waiting (as Ctrl-C
    raises KeyboardInterrupt): a stop is never held up by a wait for the
    broker's first answer."""


def _terminated(*_: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the first one stops it; more do not cut the stop short
    raise _Terminated


def _serve_until_stopped(server: SpectatorServer, ready: Callable[[], None]) -> None:
    """Serve until SIGTERM or Ctrl-C; ``ready`` runs once serving (it may raise).
    Under Docker this is PID 1, which the kernel sends no signal its handler
    does not take: SIGTERM is handled, and stops it within about a second
    whatever it was doing, open event streams and all."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        server.start()
        ready()
        threading.Event().wait()  # until a signal
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        server.close()


@click.command()
@click.argument("record_file", metavar="[FILE]", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Instead of FILE: a game of the referee's journal (a referee may be running on it).",
)
@click.option("--arena", default="", help="With --state: the arena's prefix (default: the unprefixed arena).")
@click.option(
    "--game", "game_no", type=int, help="With --state: the game number (salvo journal list; default: the latest)."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port (default: a free one).")
@click.option("--no-browser", is_flag=True, help="Only print the viewer's address.")
@log_level_option
def replay(
    record_file: Path | None,
    state: Path | None,
    arena: str,
    game_no: int | None,
    host: str,
    port: int,
    no_browser: bool,
    log_level: str,
) -> None:
    """Replay a finished game in the browser, salvo by salvo.

    FILE is a game record (the JSON of /game/record) or a `salvo journal
    export` JSON-lines file (its last record is shown). Or, with --state, a
    game of the referee's journal by its number (`salvo journal list` shows
    them): `salvo replay --state salvo-referee.db --arena arena1 --game 3`.
    A local server serves the replay viewer with it; its address is printed
    and opened in a browser. The viewer steps, scrubs and plays at any speed;
    its address always points at the salvo shown.
    """
    import webbrowser

    setup_logging(log_level)
    if (record_file is None) == (state is None):
        raise click.UsageError("give a record FILE or --state (a game of the referee's journal), one of them")
    if state is not None:
        records, source = [_journal_record(state, arena, game_no)], f"{state}"
    else:
        assert record_file is not None
        records, source = _file_records(record_file), str(record_file)
    server = _spectator_server(host, port, None, records=records)
    url = f"{server.url}replay"

    def ready() -> None:
        click.echo(f"replay viewer of {source} on {url} (Ctrl-C stops)")
        if not no_browser:
            webbrowser.open(url)

    _serve_until_stopped(server, ready)


def _file_records(record_file: Path) -> list[bytes]:
    from salvo.web.spectate import read_records

    try:
        records = read_records(record_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LocalFileError(f"cannot read {record_file}: {exc}") from None
    if not records:
        raise LocalFileError(f"{record_file} holds no game record")
    return records


def _journal_record(state: Path, arena: str, game_no: int | None) -> bytes:
    """The record of a game of the journal, as the referee published it."""
    import io

    from salvo.organiser.journaltools import export_record

    out = io.StringIO()
    export_record(state, out, arena.strip("/"), game_no)  # JournalError: no such game, not over
    return out.getvalue().encode()
