"""``salvo referee``: run the referee."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from salvo.cli.common import (
    acl_option,
    arena_prefixes,
    broker_option,
    health_file_option,
    key_file_option,
    log_level_option,
    parse_broker,
    resume_window_option,
    setup_logging,
    stop_on_signals,
)
from salvo.cli.serve import check_acl, game_config, pace_option
from salvo.game import defaults

if TYPE_CHECKING:
    from salvo.net.mqtt import Broker


@click.command()
@broker_option
@click.option("--prefix", default="", help="Arena prefix: topics become /PREFIX/game/... (default: none).")
@click.option(
    "--arenas",
    envvar="SALVO_ARENAS",
    help="Run several arenas: a count N (arena1..arenaN), or comma-separated prefixes and ranges M-N"
    " (arenaM..arenaN; other referee processes may hold the other ranges).",
)
@click.option(
    "--placement-timeout",
    type=click.FloatRange(min=0, min_open=True),
    envvar="SALVO_PLACEMENT_TIMEOUT",
    default=defaults.PLACEMENT_TIMEOUT_S,
    show_default=True,
    help="Seconds after the latest join until placement closes.",
)
@click.option(
    "--turn-timeout",
    type=click.FloatRange(min=0, min_open=True),
    envvar="SALVO_TURN_TIMEOUT",
    default=defaults.TURN_TIMEOUT_S,
    show_default=True,
    help="Seconds a player has to fire a salvo.",
)
@click.option(
    "--reset-after",
    type=click.FloatRange(min=0, min_open=True),
    envvar="SALVO_RESET_AFTER",
    default=defaults.RESET_AFTER_S,
    show_default=True,
    help="Seconds from game over until the retained game is cleared and the lobby reopens.",
)
@click.option(
    "--min-players",
    type=click.IntRange(min=2),
    default=defaults.MIN_PLAYERS,
    show_default=True,
    help="Players needed before a game starts as soon as all fleets are complete.",
)
@click.option(
    "--max-players", type=click.IntRange(min=2), default=defaults.MAX_PLAYERS, show_default=True, help="Lobby size."
)
@click.option(
    "--max-missed-turns",
    type=click.IntRange(min=1),
    default=defaults.MAX_MISSED_TURNS,
    show_default=True,
    help="Turns in a row timed out without a shot before a player is dropped.",
)
@pace_option
@click.option("--seed", type=int, help="Seed for drawing the first player (default: random).")
@key_file_option
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-referee.db",
    show_default=True,
    envvar="SALVO_STATE",
    help="SQLite journal of every game (created 0600): a restarted referee resumes.",
)
@click.option(
    "--client-id",
    help="MQTT client id base (default: salvo-referee-<12 hex digits derived from the key file>, which nobody"
    " without the key file can guess; its session survives restarts; one process per id).",
)
@click.option(
    "--teams",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SALVO_TEAMS",
    help="Team registry (salvo teams add): admit only these teams, with their secret. Any shared network needs it.",
)
@click.option(
    "--sealed-joins-only",
    is_flag=True,
    envvar="SALVO_SEALED_JOINS_ONLY",
    help="Refuse plain-JSON joins: a team's secret then never crosses the network or sits in the broker.",
)
@click.option(
    "--fresh",
    is_flag=True,
    envvar="SALVO_FRESH",
    help="Start even though the broker shows a game in progress that the state file does not hold (an emptied,"
    " replaced or deleted state file, another referee's game): it is ended and a new game begins. Without it the"
    " referee refuses (exit 4). A finished game of a stopped referee needs no flag; neither does this state file's"
    " own game.",
)
@acl_option
@health_file_option
@resume_window_option
@click.option(
    "--allow-unbound-fire",
    is_flag=True,
    help="UNSAFE: also take v1 fire data {x, y} that names no target or game; such a signature can be"
    " replayed at another target, in another game or arena (docs/security.md). Off by default.",
)
@log_level_option
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
    pace: float,
    seed: int | None,
    key_file: Path,
    state: Path,
    client_id: str | None,
    teams: Path | None,
    sealed_joins_only: bool,
    fresh: bool,
    acl: Path | None,
    health_file: Path | None,
    resume_window: int,
    allow_unbound_fire: bool,
    log_level: str,
) -> None:
    """Run the referee: the single source of truth of the game.

    Attaches to the broker, publishes /game/server (up; the last will says
    down) and /game/pubkey, and runs lobby -> turn -> over on the protocol's
    topics until SIGINT or SIGTERM. Every accepted and rejected message is
    logged on one line. Every accepted event is journaled in --state first,
    so a referee killed at any moment and started again with the same state
    file resumes the same game.
    """
    from salvo.referee import bootstrap
    from salvo.referee.ownership import FREE_PLAY
    from salvo.referee.service import Referee

    setup_logging(log_level)
    target = parse_broker(broker, username, password)
    prefixes = arena_prefixes(prefix, arenas)
    check_acl(acl, prefixes)
    config = game_config(
        placement_timeout=placement_timeout,
        turn_timeout=turn_timeout,
        reset_after=reset_after,
        min_players=min_players,
        max_players=max_players,
        max_missed_turns=max_missed_turns,
        pace_s=pace,
    )
    key = bootstrap.load_key(key_file)
    store, games = bootstrap.referee_arenas(
        state,
        target,
        prefixes,
        config,
        seed,
        key,
        fresh=fresh,
        sealed_joins_only=sealed_joins_only,
        unbound_fire=allow_unbound_fire,
    )
    bootstrap.claim(target, games, store, fresh=fresh, role=FREE_PLAY)
    _clear_the_tournaments_topics(target)
    try:
        registry = bootstrap.load_registry(teams) if teams is not None else None
        service = Referee(
            games,
            target,
            client_id=bootstrap.client_id(client_id, "salvo-referee", key),
            journal=store,
            session_expiry_s=resume_window,
            registry=registry,
            health_file=health_file,
        )
        bootstrap.run_until(service, stop_on_signals())
    finally:
        store.close()


def _clear_the_tournaments_topics(broker: Broker) -> None:
    """Free play: no tournament game is on (salvo.organiser.tournament.night.clear_for_free_play)."""
    from salvo.organiser.tournament.night import clear_for_free_play

    log = logging.getLogger("salvo.referee")
    try:
        cleared = clear_for_free_play(broker)
    except (TimeoutError, PermissionError) as exc:
        log.warning("could not clear the tournament's assignments for free play: %s", exc)
        return
    if cleared:
        log.info("free play: cleared %d tournament topics (%s)", len(cleared), ", ".join(cleared[:3]))
