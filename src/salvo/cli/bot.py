"""A team's command: ``salvo bot``, a built-in strategy playing as one team.

It needs nothing but the SDK (:mod:`salvo.sdk`) and :mod:`salvo.cli.common`:
the team's install (the ``salvo-sdk`` distribution, sdk/pyproject.toml)
carries this module and the ``salvo`` command with it, so the line on a
team's card runs there as it does with the full package.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

from salvo.cli.common import CommandFailed, broker_option, log_level_option, parse_broker, setup_logging

#: After SIGTERM/SIGINT, the longest the command waits for its clean
#: disconnect before it exits anyway (Docker kills at 10 s; we promise 2).
STOP_GRACE_S = 1.5


@click.command()
@broker_option
@click.option("--name", required=True, help="Team name (also the MQTT username unless --username).")
@click.option("--secret", required=True, envvar="SALVO_SECRET", help="The team's game secret.")
@click.option(
    "--strategy", type=click.Choice(["random", "hunt-target", "density"]), default="density", show_default=True
)
@click.option(
    "--mode",
    type=click.Choice(["free-play", "tournament"]),
    default="free-play",
    show_default=True,
    envvar="SALVO_MODE",
    help="free-play: play in the arena --prefix names, game after game; tournament: play wherever"
    " /tournament/assignments/NAME says, until the tournament is done (as --tournament).",
)
@click.option("--prefix", default="", envvar="SALVO_BOT_ARENA", help="Arena prefix (free play).")
@click.option("--games", type=click.IntRange(min=1), help="Stop after this many games (default: play on forever).")
@click.option("--seed", type=int, help="Seed for the strategy's randomness.")
@click.option("--plain", is_flag=True, help="Join with plain JSON instead of a request sealed to /game/pubkey.")
@click.option(
    "--tournament",
    "follow",
    is_flag=True,
    help="Play wherever /tournament/assignments/NAME says, until the tournament is done (--mode tournament;"
    " wins over --mode).",
)
@click.option(
    "--after-tournament",
    type=click.Choice(["exit", "wait"]),
    default="exit",
    show_default=True,
    envvar="SALVO_BOT_AFTER_TOURNAMENT",
    help="(tournament) When it is done: exit, or wait for the next tournament's assignments (a house bot:"
    " a container would otherwise be started again and again).",
)
@log_level_option
def bot(
    broker: str,
    username: str | None,
    password: str | None,
    name: str,
    secret: str,
    strategy: str,
    mode: str,
    prefix: str,
    games: int | None,
    seed: int | None,
    plain: bool,
    follow: bool,
    after_tournament: str,
    log_level: str,
) -> None:
    """Play as one team with a built-in strategy.

    Joins, places a fleet, plays every turn, and after each reset joins the
    next game. Prints one summary line per game. With --mode tournament (or
    --tournament) it plays in the arena the tournament assigns, game after
    game, until it is done.

    One MQTT connection serves the whole evening: a broker that cannot be
    reached, drops the connection or refuses the login is retried with
    back-off (1 s doubling to 30 s, jittered), one log line per retry.
    SIGTERM or SIGINT leaves the broker cleanly and exits 0.
    """
    from salvo.sdk.bots import make_strategy
    from salvo.sdk.bots.service import play_on
    from salvo.sdk.client import SalvoClient
    from salvo.sdk.outcomes import GameRecord, JoinRefused, PlacementRefused

    setup_logging(log_level)
    tournament = follow or mode == "tournament"
    # A team's broker login is its name (salvo teams add): a password alone means that one.
    target = parse_broker(broker, username or (name if password else None), password)
    try:
        client = SalvoClient(name, secret, target, prefix="" if tournament else prefix, sealed=not plain)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--name/--prefix") from None
    played = 0

    def report(record: GameRecord) -> None:
        nonlocal played
        played += 1  # this bot's games, 1, 2, 3 ... (an arena counts its own)
        click.echo(record.line(played))

    with _StopOnSignals(client) as stop:
        try:
            client.start()
            if tournament:
                from salvo.sdk.follow import follow as follow_tournament

                n = follow_tournament(
                    target,
                    name,
                    secret,
                    lambda: make_strategy(strategy, seed),
                    on_game=report,
                    client=client,
                    wait_after_done=after_tournament == "wait",
                )
                click.echo(f"tournament done: {n} games played by this bot since it started")
            else:
                play_on(client, make_strategy(strategy, seed), games, report)
        except ConnectionError as exc:  # the client was closed: by a signal, or something went wrong
            if not stop.requested.is_set():
                raise CommandFailed(str(exc)) from None
        except (JoinRefused, PlacementRefused) as exc:
            raise CommandFailed(f"the referee refused: {exc}") from None
        finally:
            stop.close_client()
    if stop.requested.is_set():
        click.echo("stopped", err=True)


class _StopOnSignals:
    """While in use, SIGTERM and SIGINT close the client (a clean MQTT
    DISCONNECT) from a thread of its own: whatever the main thread waits on
    raises ConnectionError, and :attr:`requested` says it was asked for.
    Installed explicitly: as a container's PID 1 the process would ignore
    SIGTERM, and in a session of its own it gets no terminal SIGINT."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requested = threading.Event()
        self._signal = ""
        self._wake = threading.Event()  # a signal came, or the command is done
        self._closer = threading.Thread(target=self._close, name="salvo-stop", daemon=True)
        self._before: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignals:
        self._closer.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._before[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, before in self._before.items():
            if before is not None:
                signal.signal(sig, before)
        self._wake.set()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Runs on the main thread between any two of its steps: it only sets
        # events nobody holds for long; the closing is the closer's.
        if not self.requested.is_set():
            self._signal = signal.Signals(signum).name
            self.requested.set()
            self._wake.set()

    def _close(self) -> None:
        self._wake.wait()
        if self.requested.is_set():
            logging.getLogger("salvo.bot").info("received %s: leaving the broker", self._signal)
            self.client.close()

    def close_client(self) -> None:
        """Close the client now, or, after a signal, give the closer up to
        STOP_GRACE_S (a broker that drops packets could hold it longer)."""
        if self.requested.is_set():
            self._closer.join(STOP_GRACE_S)
        else:
            self.client.close()
