"""``salvo tournament``: run a tournament night, watch it, steer it, export it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from salvo.cli.common import (
    ExitCode,
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
    from collections.abc import Callable

    from salvo.net.loop import Loop
    from salvo.net.mqtt import Broker
    from salvo.organiser.tournament.scoring import Row

_STATE: dict[str, Any] = {
    "type": click.Path(dir_okay=False, path_type=Path),
    "default": "salvo-tournament.json",
    "show_default": True,
    "envvar": "SALVO_TOURNAMENT_STATE",
    "help": "The tournament's decisions and results: a restarted director carries on.",
}
state_option = click.option("--state", **_STATE)


class _WithControls(click.Group):
    """The controls' commands made from salvo.organiser.tournament.controls.ACTIONS
    when asked for (importing the CLI imports no domain module)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from salvo.organiser.tournament.controls import ACTIONS

        return sorted([*super().list_commands(ctx), *ACTIONS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from salvo.organiser.tournament.controls import ACTIONS

        if cmd_name in ACTIONS:
            return _control_command(cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_WithControls)
def tournament() -> None:
    """A tournament night: `run` the director; `status`, controls and
    `export` from another terminal (they talk to the running director through
    files next to its --state)."""


@tournament.command()
@broker_option
@click.option(
    "--teams",
    "registry_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    envvar="SALVO_TEAMS",
    help="Team registry (salvo teams add): who plays. Teams added later wait for admit-late.",
)
@click.option(
    "--arenas", default="2", show_default=True, envvar="SALVO_ARENAS", help="A count N (arena1..N) or prefixes."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["round-robin", "swiss"]),
    default="round-robin",
    show_default=True,
    envvar="SALVO_FORMAT",
)
@click.option(
    "--table-size",
    type=click.IntRange(2, 4),
    default=2,
    show_default=True,
    envvar="SALVO_TABLE_SIZE",
    help="Teams per game: 2 (duels) or tables of 3-4 scored by finishing place.",
)
@click.option(
    "--rounds", type=click.IntRange(min=1), envvar="SALVO_ROUNDS", help="Rounds (default: round robin all; swiss 3)."
)
@state_option
@click.option(
    "--referee-state",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-tournament-referee.db",
    show_default=True,
    envvar="SALVO_TOURNAMENT_REFEREE_STATE",
    help="The referee journal of the tournament's arenas (not free play's salvo-referee.db).",
)
@key_file_option
@click.option(
    "--placement-timeout",
    type=click.FloatRange(min=1),
    default=defaults.PLACEMENT_TIMEOUT_S,
    show_default=True,
    envvar="SALVO_PLACEMENT_TIMEOUT",
)
@click.option(
    "--turn-timeout",
    type=click.FloatRange(min=0.1),
    default=defaults.TURN_TIMEOUT_S,
    show_default=True,
    envvar="SALVO_TURN_TIMEOUT",
)
@click.option(
    "--reset-after",
    type=click.FloatRange(min=0, min_open=True),  # (Config refuses 0: a game over would never reset)
    default=defaults.TOURNAMENT_RESET_AFTER_S,
    show_default=True,
    envvar="SALVO_RESET_AFTER",
)
@pace_option
@click.option(
    "--no-show-after",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    envvar="SALVO_NO_SHOW_AFTER",
    help="Seconds after its assignment a game must have started, else it is forfeited by whoever "
    "has no approved fleet (0: wait for ever). Longer than --placement-timeout.",
)
@resume_window_option
@click.option(
    "--console",
    "console_at",
    default="127.0.0.1:8470",
    show_default=True,
    envvar="SALVO_CONSOLE",
    help="HOST:PORT of the organiser console (needs --console-password), or 'off'.",
)
@click.option(
    "--console-password", envvar="SALVO_CONSOLE_PASSWORD", help="The organiser console's password (8+ characters)."
)
@click.option(
    "--console-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SALVO_CONSOLE_CERT",
    help="TLS certificate of the console (default data/broker/server.crt when present: salvo tls).",
)
@click.option(
    "--console-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SALVO_CONSOLE_KEY",
    help="Its private key (default data/broker/server.key when present).",
)
@click.option(
    "--client-id", help="MQTT client id base of its referee (default: salvo-tournament-<derived from the key file>)."
)
@click.option(
    "--fresh",
    is_flag=True,
    envvar="SALVO_FRESH",
    help="Take the arenas even where the broker shows a game (over, or in progress) that --referee-state does not"
    " hold, such as the last game of an earlier tournament on the same arenas: a new game replaces it. Without it"
    " the director refuses (exit 4). A finished game needs no flag, nor a free-play game (the tournament ends it).",
)
@click.option(
    "--sealed-joins-only",
    is_flag=True,
    envvar="SALVO_SEALED_JOINS_ONLY",
    help="Refuse plain-JSON joins: a team's secret then never crosses the network or sits in the broker.",
)
@acl_option
@health_file_option
@click.option(
    "--keep-serving",
    is_flag=True,
    envvar="SALVO_KEEP_SERVING",
    help="After the final ranking, keep serving the console (its exports) and the projector (the champion) until"
    " stopped, instead of exiting.",
)
@log_level_option
def run(
    broker: str,
    username: str | None,
    password: str | None,
    registry_path: Path,
    arenas: str,
    fmt: str,
    table_size: int,
    rounds: int | None,
    state: Path,
    referee_state: Path,
    key_file: Path,
    placement_timeout: float,
    turn_timeout: float,
    reset_after: float,
    pace: float,
    no_show_after: float,
    resume_window: int,
    console_at: str,
    console_password: str | None,
    console_cert: Path | None,
    console_key: Path | None,
    client_id: str | None,
    fresh: bool,
    sealed_joins_only: bool,
    acl: Path | None,
    health_file: Path | None,
    keep_serving: bool,
    log_level: str,
) -> None:
    """Run the tournament: fixtures onto arenas, standings, until the last game.

    Runs the referee for the arenas itself, each arena admitting only the
    teams assigned there; tells every team where to play on the retained
    /tournament/assignments/TEAM (salvo bot --tournament follows it); keeps
    the standings retained on /tournament/standings; prints the final
    ranking. SIGTERM or Ctrl-C pauses it (exit 0, teams keep waiting): start
    it again with the same files and it carries on, taking over the games in
    progress and the results of games that ended meanwhile.
    """
    from salvo.organiser import tournament as night
    from salvo.organiser.tournament.director import Director
    from salvo.referee import bootstrap
    from salvo.referee.ownership import TOURNAMENT
    from salvo.referee.service import Referee

    setup_logging(log_level)
    if err := night.no_show_error(no_show_after, placement_timeout):
        raise click.BadParameter(err, param_hint="--no-show-after")
    console = _console_settings(console_at, console_password, console_cert, console_key)
    target = parse_broker(broker, username, password)
    registry = bootstrap.load_registry(registry_path)
    teams = night.entrants(registry, registry_path)
    prefixes = arena_prefixes("", arenas)
    check_acl(acl, prefixes)
    plan, late = night.plan(state, fmt, rounds, teams, table_size)
    if late:
        click.echo(f"registered after the start, waiting for admit-late/refuse-late: {', '.join(late)}", err=True)
    config = game_config(
        placement_timeout=placement_timeout,
        turn_timeout=turn_timeout,
        reset_after=reset_after,
        min_players=table_size,
        max_players=table_size,
        pace_s=pace,
    )
    key = bootstrap.load_key(key_file)
    store, games = bootstrap.tournament_arenas(
        referee_state, prefixes, config, key, sealed_joins_only=sealed_joins_only
    )
    bootstrap.claim(target, games, store, fresh=fresh, role=TOURNAMENT)
    server = None
    try:
        roster = night.restrict_lobbies(games)
        service = Referee(
            games,
            target,
            client_id=bootstrap.client_id(client_id, "salvo-tournament", key),
            journal=store,
            registry=registry,
            session_expiry_s=resume_window,
            health_file=health_file,
        )
        # One loop carries every MQTT client of the night (docs: CONTRIBUTING.md, "Threads"): it runs
        # before the director subscribes on it, the arenas begin once it has adopted its games (hold).
        service.start(arenas=False)
        try:
            director = Director(
                broker=target,
                arenas=prefixes,
                state=plan,
                state_path=state,
                roster=roster,
                referee=service.soon,
                store=store,
                no_show_after=no_show_after or None,
                registered=lambda: sorted(registry.teams),
                loop=service.loop,
            )
        except BaseException:
            service.stop()
            raise

        def started() -> None:
            nonlocal server
            stop_on_signals(director.halt)
            if console is not None:
                # The projector counts a game in progress from its start: the
                # journal has every salvo, the broker retains only the last.
                from salvo.organiser.journaltools import heard_so_far

                server = _start_console(
                    director, target, *console, history=lambda: heard_so_far(store, prefixes), loop=service.loop
                )

        def finished(rows: list[Row]) -> None:
            click.echo(night.ranking_text(rows))
            if keep_serving:
                click.echo("the tournament is over: serving the console and the projector until stopped", err=True)
                director.linger()

        rows = night.hold(director, service, on_started=started, on_done=finished)
    finally:
        if server is not None:
            server.close()
        store.close()
    if (failure := bootstrap.failure_of(service.fatal)) is not None:
        raise failure  # the referee's own stop: its exit code and reason (a journal that cannot be written: 4)
    if rows is None:
        click.echo("paused: start it again with the same --state to carry on", err=True)


def _console_settings(
    at: str, password: str | None, cert: Path | None, key: Path | None
) -> tuple[str, int, str, Path | None, Path | None] | None:
    if at == "off":
        return None
    host, _, port = at.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"HOST:PORT or off, not {at!r}", param_hint="--console")
    if not password:
        click.echo("no --console-password (SALVO_CONSOLE_PASSWORD): the organiser console is off", err=True)
        return None
    if len(password) < 8:
        raise click.BadParameter("at least 8 characters", param_hint="--console-password")
    default_cert, default_key = Path("data/broker/server.crt"), Path("data/broker/server.key")
    if cert is None and key is None and default_cert.exists() and default_key.exists():
        cert, key = default_cert, default_key
    if (cert is None) != (key is None):
        raise click.BadParameter("give both --console-cert and --console-key", param_hint="--console-cert")
    return host.strip("[]"), int(port), password, cert, key


def _start_console(
    controls: Any,
    broker: Broker,
    host: str,
    port: int,
    password: str,
    cert: Path | None,
    key: Path | None,
    *,
    history: Callable[[], list[tuple[str, str]]] | None = None,
    loop: Loop | None = None,
) -> Any:
    """The organiser console, with the projector and the replays on the same
    server; the projector's broker client on ``loop`` (the referee's)."""
    from salvo.organiser.console import Console
    from salvo.web.spectate import Projector

    projector = Projector(broker, history=history, loop=loop)
    server = Console(
        controls, host, port, password, certfile=cert, keyfile=key, projector=projector, health=controls.health
    )
    server.start()
    click.echo(f"organiser console: {server.url}", err=True)
    click.echo(f"projector: {server.projector_url} (replays: {server.url}replay)", err=True)
    return server


# -- from another terminal --------------------------------------------------------------


@tournament.command()
@state_option
@click.option("--json", "as_json", is_flag=True, help="The whole status as JSON.")
def status(state: Path, as_json: bool) -> None:
    """Round, games left, who is playing where, the leader, the table."""
    from salvo.organiser.tournament import spool
    from salvo.organiser.tournament.reports import status as offline_status
    from salvo.organiser.tournament.state import State

    saved = State.load(state)
    if saved is None:
        raise click.ClickException(f"no tournament in {state}")
    rid = spool.send(state, "status", {}, "cli")
    answer = spool.reply(state, rid, timeout=3)
    st = answer["status"] if answer else offline_status(saved, running=False)
    if as_json:
        click.echo(json.dumps(st, indent=1))
        return
    from salvo.cli.tournament_view import status_text

    click.echo(status_text(st))


@tournament.command()
@state_option
@click.option("--format", "fmt", type=click.Choice(["json", "csv"]), default="json", show_default=True)
@click.option("--what", type=click.Choice(["games", "teams"]), default="games", show_default=True, help="(csv)")
@click.option("-o", "--out", type=click.File("w"), default="-", help="Where to write (default: standard output).")
def export(state: Path, fmt: str, what: str, out: Any) -> None:
    """Every game (arena, journal game, players, result, termination, turns,
    duration, times) and per-team statistics, as JSON or CSV."""
    from salvo.organiser.tournament import reports
    from salvo.organiser.tournament.state import State

    saved = State.load(state)
    if saved is None:
        raise click.ClickException(f"no tournament in {state}")
    if fmt == "json":
        out.write(json.dumps(reports.export_json(saved), indent=1) + "\n")
    else:
        out.write(reports.export_csv(saved, what))


def _control_command(name: str) -> click.Command:
    from salvo.organiser.tournament.controls import ACTIONS

    action = ACTIONS[name]

    def callback(state: Path, wait: float, **args: Any) -> None:
        from salvo.organiser.tournament import spool
        from salvo.organiser.tournament.state import State

        if State.load(state) is None:
            raise click.ClickException(f"no tournament in {state}")
        sent = {k: v for k, v in args.items() if v is not None}
        if sent.get("winner") in ("draw", "-"):
            sent["winner"] = ""
        rid = spool.send(state, name, sent, "cli")
        answer = spool.reply(state, rid, timeout=wait)
        if answer is None:
            click.echo(f"queued: the director has not answered in {wait:g}s; it applies it when it runs", err=True)
            raise SystemExit(ExitCode.FAILED)
        if not answer.get("ok"):
            raise click.ClickException(f"refused ({answer.get('code')}): {answer.get('reason')}")
        click.echo(f"{name}: {answer['entry']['result']}")

    params: list[click.Parameter] = []
    for arg, kind in action.args.items():
        if kind == "text":
            params.append(click.Option([f"--{arg}"], default="", help="Why (kept in the audit)."))
        elif kind == "seconds":
            params.append(click.Argument([arg], type=click.FloatRange(min=0, min_open=True)))
        elif kind == "game":
            params.append(click.Argument([arg], type=click.IntRange(min=0)))
        else:
            params.append(click.Argument([arg]))
    params += [
        click.Option(["--state"], **_STATE),
        click.Option(["--wait"], type=float, default=15.0, show_default=True, help="Seconds to wait for the answer."),
    ]
    return click.Command(name, callback=callback, params=params, help=action.help)
