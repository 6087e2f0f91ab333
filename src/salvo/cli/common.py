"""What every ``salvo`` command shares: the exit codes and the exceptions
that carry them, logging set-up, and the broker, arena and referee options.

It imports nothing above the SDK's layers, not even lazily: the team's
install (sdk/pyproject.toml) carries it for ``salvo bot``. What the
referee's and the director's commands share beyond options is
:mod:`salvo.cli.serve`.

Domain failures are classified by class (:mod:`salvo.failures`); the main
group turns any that reaches it into its exit code (:func:`exit_for`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from salvo.failures import BrokerRefusal, Failure, LocalFailure

if TYPE_CHECKING:
    from salvo.net.mqtt import Broker

F = TypeVar("F", bound=Callable[..., Any])


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    BROKER_REFUSED = 3
    LOCAL_FILE = 4


class CommandFailed(click.ClickException):
    """A failure the user can act on; the class says the exit code."""

    exit_code = ExitCode.FAILED


class BrokerRefused(CommandFailed):
    exit_code = ExitCode.BROKER_REFUSED


class LocalFileError(CommandFailed):
    exit_code = ExitCode.LOCAL_FILE


def exit_for(failure: Failure) -> CommandFailed:
    """The exit a domain failure ends the command with, by its class."""
    if isinstance(failure, BrokerRefusal):
        return BrokerRefused(str(failure))
    if isinstance(failure, LocalFailure):
        return LocalFileError(str(failure))
    return CommandFailed(str(failure))


@contextlib.contextmanager
def local_files() -> Iterator[None]:
    """An OSError (a file that cannot be read or written) exits 4."""
    try:
        yield
    except OSError as exc:
        raise LocalFileError(str(exc)) from None


@contextlib.contextmanager
def connection_exits() -> Iterator[None]:
    """A broker that refuses our login exits 3, one out of reach 1."""
    try:
        yield
    except ConnectionRefusedError as exc:
        raise BrokerRefused(str(exc)) from None
    except ConnectionError as exc:
        raise CommandFailed(str(exc)) from None


def setup_logging(level: str) -> None:
    """The one place logging is configured: library code only logs."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )


# -- options ------------------------------------------------------------------------------


def _remember_ca_file(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    ctx.meta["salvo.ca_file"] = value


def broker_option(f: F) -> F:
    """--broker, --username, --password and --ca-file (read by :func:`parse_broker`)."""
    f = click.option(
        "--ca-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar="SALVO_CA_FILE",
        expose_value=False,
        callback=_remember_ca_file,
        help="For mqtts:// and wss://: trust only this CA (the organiser's ca.crt from `salvo tls`).",
    )(f)
    f = click.option("--password", envvar="SALVO_PASSWORD", help="MQTT password (or in the URL).")(f)
    f = click.option("--username", envvar="SALVO_USERNAME", help="MQTT username (or in the URL).")(f)
    return click.option(
        "--broker",
        envvar="SALVO_BROKER",
        default="mqtt://localhost:1883",
        show_default=True,
        help="Broker URL: mqtt://[user[:pass]@]host[:port], mqtts://, ws://, wss://; several, comma-separated, for"
        " the nodes of a cluster (tried in turn when one fails).",
    )(f)


key_file_option = click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-referee.key",
    show_default=True,
    envvar="SALVO_KEY_FILE",
    help="The referee's X25519 key (created 0600 on first run).",
)
#: The referee's and the director's: the arenas must be the ones the broker's ACL opens to teams.
acl_option = click.option(
    "--acl",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SALVO_ACL",
    help="The broker's ACL (salvo teams acl): refuse to start on an arena it does not open to teams, who could"
    " not play there.",
)
#: The referee's and the director's: how the service reports on itself (salvo night health).
health_file_option = click.option(
    "--health-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SALVO_HEALTH_FILE",
    help="Rewrite this file every second from the referee's loop: 'ok' while every arena is connected to the"
    " broker, else why not (for a container's healthcheck: salvo night health).",
)
#: The referee's and the director's: how long the broker keeps the referee's session.
resume_window_option = click.option(
    "--resume-window",
    type=click.IntRange(min=1),
    default=120,
    show_default=True,
    envvar="SALVO_RESUME_WINDOW",
    help="Seconds the referee may be away (stopped, crashed, cut off) and still take what teams sent meanwhile:"
    " its MQTT session expiry. Away longer, it starts on a clean session and the broker drops that backlog"
    " (docs/reliability.md).",
)
log_level_option = click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)


#: The signal that stopped the command (stop_on_signals), if one did.
signalled: signal.Signals | None = None


def stop_on_signals(on_stop: Callable[[], object] | None = None) -> threading.Event:
    """An event set on SIGINT or SIGTERM (each logged, and kept in
    :data:`signalled`); ``on_stop`` runs too. Installed explicitly: as a
    container's PID 1, Python would otherwise ignore SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        global signalled
        signalled = signal.Signals(signum)
        logging.getLogger("salvo").info("received %s, shutting down", signalled.name)
        stop.set()
        if on_stop is not None:
            on_stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def parse_broker(url: str, username: str | None, password: str | None) -> Broker:
    from salvo.net.mqtt import Broker

    ca_file = click.get_current_context().meta.get("salvo.ca_file")
    try:
        broker = Broker.from_url(url).with_credentials(username, password)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None
    return broker.with_ca_file(str(ca_file) if ca_file else None)


#: Arenas one process may be given: ten times what it is measured to hold
#: (docs/scaling.md); a typo like 1-1000000 is an error, not a gigabyte.
MAX_ARENAS = 10_000


def _count(n: int) -> int:
    if not 1 <= n <= MAX_ARENAS:
        raise click.BadParameter(f"{n} arenas: one process takes 1 to {MAX_ARENAS}", param_hint="--arenas")
    return n


def arena_prefixes(prefix: str, arenas: str | None) -> list[str]:
    """--prefix, or --arenas: a count N (arena1..arenaN), or a comma-separated
    list of prefixes and ranges M-N (arenaM..arenaN): several referee
    processes (or machines) share a league's arenas by range, e.g. 1-500
    and 501-1000."""
    from salvo.spec.topics import name_error

    names: list[str] = []
    if arenas and re.fullmatch(r"\s*[0-9]+\s*", arenas):
        names = [f"arena{i}" for i in range(1, _count(int(arenas)) + 1)]
    elif arenas:
        for item in (part.strip() for part in arenas.split(",")):
            if match := re.fullmatch(r"(\d+)-(\d+)", item):
                first, last = int(match[1]), int(match[2])
                if not 1 <= first <= last:
                    raise click.BadParameter(f"{item!r}: a range runs from 1 up, first to last", param_hint="--arenas")
                _count(len(names) + last - first + 1)
                names += [f"arena{i}" for i in range(first, last + 1)]
            else:
                names.append(item)
    else:
        names = [prefix]
    for name in names:
        if name and (err := name_error(name, "arena prefix")):
            raise click.BadParameter(f"{name!r}: {err}", param_hint="--prefix/--arenas")
    if arenas and not all(names):
        raise click.BadParameter("empty arena prefix in the list", param_hint="--arenas")
    if len(set(names)) != len(names):
        raise click.BadParameter("arena prefixes must differ", param_hint="--arenas")
    return names
