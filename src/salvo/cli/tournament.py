"""``salvo tournament``: run a tournament night."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from salvo.cli.common import (
    ExitCode,
    arena_prefixes,
    broker_option,
    game_config,
    key_file_option,
    log_level_option,
    parse_broker,
    setup_logging,
)


@click.command()
@broker_option
@click.option(
    "--teams",
    "registry_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    envvar="SALVO_TEAMS",
    help="Team registry (salvo teams add): who plays.",
)
@click.option("--arenas", default="2", show_default=True, help="Tables at once: a count N (arena1..N) or prefixes.")
@click.option("--format", "fmt", type=click.Choice(["round-robin", "swiss"]), default="round-robin", show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), help="Rounds (default: round robin all; swiss 3).")
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-tournament.json",
    show_default=True,
    help="The tournament's decisions and results: a restarted director carries on.",
)
@click.option(
    "--referee-state",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-referee.db",
    show_default=True,
    help="The referee journal of the arenas.",
)
@key_file_option
@click.option("--placement-timeout", type=click.FloatRange(min=1), default=60.0, show_default=True)
@click.option("--turn-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True)
@click.option("--reset-after", type=click.FloatRange(min=0), default=10.0, show_default=True)
@click.option(
    "--no-show-after",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds after its assignment a game must have started, else it is forfeited by whoever "
    "has no approved fleet (0: wait for ever). Longer than --placement-timeout.",
)
@click.option(
    "--client-id", help="MQTT client id base of its referee (default: salvo-tournament-<derived from the key file>)."
)
@log_level_option
def tournament(
    broker: str,
    username: str | None,
    password: str | None,
    registry_path: Path,
    arenas: str,
    fmt: str,
    rounds: int | None,
    state: Path,
    referee_state: Path,
    key_file: Path,
    placement_timeout: float,
    turn_timeout: float,
    reset_after: float,
    no_show_after: float,
    client_id: str | None,
    log_level: str,
) -> None:
    """Run a tournament: schedule two-player games onto arenas, keep standings.

    Runs the referee for the arenas itself, each arena admitting only the two
    teams scheduled there; tells every team where to play on the retained
    /tournament/assignments/TEAM (salvo bot --tournament follows it); keeps
    the standings (wins, points, hits, accuracy) retained on
    /tournament/standings; prints the final ranking. A game not started
    --no-show-after seconds after its assignment is forfeited by the team(s)
    without an approved fleet. Killed and started again with the same files,
    it carries on.
    """
    from salvo import bootstrap
    from salvo import tournament as night
    from salvo.referee import Referee

    setup_logging(log_level)
    target = parse_broker(broker, username, password)
    registry = bootstrap.load_registry(registry_path)
    teams = night.entrants(registry, registry_path)
    prefixes = arena_prefixes("", arenas)
    plan = night.plan(state, fmt, rounds, teams)
    if err := night.no_show_error(no_show_after, placement_timeout):
        raise click.BadParameter(err, param_hint="--no-show-after")
    config = game_config(placement_timeout, turn_timeout, reset_after, 2, 2, 3)
    key = bootstrap.load_key(key_file)
    store, games = bootstrap.tournament_arenas(referee_state, prefixes, config, key)
    bootstrap.claim(target, games, store, fresh=False)
    try:
        roster = night.restrict_lobbies(games, registry)
        service = Referee(
            games,
            target,
            client_id=bootstrap.client_id(client_id, "salvo-tournament", key),
            journal=store,
            registry=registry,
        )
        director = night.Director(
            broker=target,
            arenas=prefixes,
            state=plan,
            state_path=state,
            roster=roster,
            close_lobby=service.close_lobby,
            no_show_after=no_show_after or None,
        )
        rows = night.hold(
            director, service, on_started=lambda: signal.signal(signal.SIGTERM, lambda *_: director.stop.set())
        )
    finally:
        store.close()
    if rows is None:
        click.echo("stopped; start again with the same --state to carry on", err=True)
        raise SystemExit(ExitCode.FAILED)
    click.echo(night.ranking_text(rows))
