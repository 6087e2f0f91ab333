"""The ``salvo`` command line. Each subcommand's help is its docstring.

Exit codes: 0 success; 1 internal error or failed checks; 2 usage error;
3 the broker refused us (credentials, ACL); 4 a local file problem.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import click

from salvo import __version__


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    BROKER_REFUSED = 3
    LOCAL_FILE = 4


class SalvoError(click.ClickException):
    """A failure the user can act on; the class says the exit code."""

    exit_code = ExitCode.FAILED


class BrokerRefused(SalvoError):
    exit_code = ExitCode.BROKER_REFUSED


class LocalFileError(SalvoError):
    exit_code = ExitCode.LOCAL_FILE


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )


def _broker_option(f: Any) -> Any:
    f = click.option("--password", envvar="SALVO_PASSWORD", help="MQTT password (or in the URL).")(f)
    f = click.option("--username", envvar="SALVO_USERNAME", help="MQTT username (or in the URL).")(f)
    return click.option(
        "--broker",
        envvar="SALVO_BROKER",
        default="mqtt://localhost:1883",
        show_default=True,
        help="Broker URL: mqtt://[user[:pass]@]host[:port], mqtts://, ws://, wss://.",
    )(f)


def _parse_broker(url: str, username: str | None, password: str | None) -> Any:
    from salvo.mqtt import Broker

    try:
        return Broker.from_url(url).with_credentials(username, password)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None


def _arena_prefixes(prefix: str, arenas: str | None) -> list[str]:
    from salvo.topics import name_error

    if arenas:
        names = [f"arena{i}" for i in range(1, int(arenas) + 1)] if arenas.isdigit() else arenas.split(",")
    else:
        names = [prefix]
    for name in names:
        if name and (err := name_error(name, "arena prefix")):
            raise click.BadParameter(f"{name!r}: {err}", param_hint="--prefix/--arenas")
    if len(set(names)) != len(names):
        raise click.BadParameter("arena prefixes must differ", param_hint="--arenas")
    return names


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="salvo")
def main() -> None:
    """salvo - Battleship: Salvo over MQTT.

    The authoritative referee, plus the tools around it. Run
    `salvo COMMAND --help` for each command.
    """


@main.command()
@_broker_option
@click.option("--prefix", default="", help="Arena prefix: topics become /PREFIX/game/... (default: none).")
@click.option("--arenas", help="Run several arenas: a count N (arena1..arenaN) or comma-separated prefixes.")
@click.option(
    "--placement-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds after the latest join until placement closes.",
)
@click.option(
    "--turn-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a player has to fire a salvo.",
)
@click.option(
    "--reset-after",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Seconds from game over until the retained game is cleared and the lobby reopens.",
)
@click.option(
    "--min-players",
    type=click.IntRange(min=2),
    default=2,
    show_default=True,
    help="Players needed before a game starts as soon as all fleets are complete.",
)
@click.option("--max-players", type=click.IntRange(min=2), default=10, show_default=True, help="Lobby size.")
@click.option(
    "--max-missed-turns",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Turns in a row timed out without a shot before a player is dropped.",
)
@click.option("--seed", type=int, help="Seed for drawing the first player (default: random).")
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-referee.key",
    show_default=True,
    help="The referee's X25519 key (created 0600 on first run).",
)
@click.option(
    "--client-id",
    default="salvo-referee",
    show_default=True,
    help="MQTT client id (its session survives restarts; one process per id).",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
def referee(
    broker: str,
    username: str | None,
    password: str | None,
    prefix: str,
    arenas: str | None,
    placement_timeout: float,
    turn_timeout: float,
    reset_after: float,
    min_players: int,
    max_players: int,
    max_missed_turns: int,
    seed: int | None,
    key_file: Path,
    client_id: str,
    log_level: str,
) -> None:
    """Run the referee: the single source of truth of the game.

    Attaches to the broker, publishes /game/server (up; the last will says
    down) and /game/pubkey, and runs lobby -> turn -> over on the protocol's
    topics until SIGINT or SIGTERM. Every accepted and rejected message is
    logged on one line.
    """
    from salvo import crypto
    from salvo.engine import Config
    from salvo.referee import Referee, make_arenas

    _setup_logging(log_level)
    target = _parse_broker(broker, username, password)
    prefixes = _arena_prefixes(prefix, arenas)
    try:
        config = Config(placement_timeout, turn_timeout, reset_after, min_players, max_players, max_missed_turns)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        key = crypto.load_or_create_referee_key(key_file)
    except (OSError, Exception) as exc:
        raise LocalFileError(f"cannot use key file {key_file}: {exc}") from None
    game_seed = seed if seed is not None else int.from_bytes(os.urandom(8), "big")
    service = Referee(make_arenas(prefixes, config, game_seed, key), target, client_id=client_id)
    _serve(service)


def _serve(service: Any) -> None:
    """Run a started-or-not service until a signal or a fatal error."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger("salvo").info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    service.start()
    while not stop.wait(0.2):
        if service.any_stopped():
            break
    service.stop()
    if service.fatal:
        raise (BrokerRefused if "refused" in service.fatal else SalvoError)(service.fatal)
