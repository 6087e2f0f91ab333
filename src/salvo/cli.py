"""The ``salvo`` command line. Each subcommand's help is its docstring.

Exit codes: 0 success; 1 internal error or failed checks; 2 usage error;
3 the broker refused us (credentials, ACL); 4 a local file problem.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from salvo.teams import Registry

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


def _remember_ca_file(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    ctx.meta["salvo.ca_file"] = value


def _broker_option(f: Any) -> Any:
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
        help="Broker URL: mqtt://[user[:pass]@]host[:port], mqtts://, ws://, wss://.",
    )(f)


def _parse_broker(url: str, username: str | None, password: str | None) -> Any:
    from salvo.mqtt import Broker

    ca_file = click.get_current_context().meta.get("salvo.ca_file")
    try:
        broker = Broker.from_url(url).with_credentials(username, password)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None
    return broker.with_ca_file(str(ca_file) if ca_file else None)


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


_key_file_option = click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-referee.key",
    show_default=True,
    help="The referee's X25519 key (created 0600 on first run).",
)
_log_level_option = click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)


def _referee_key(key_file: Path) -> Any:
    from salvo import crypto

    try:
        return crypto.load_or_create_referee_key(key_file)
    except Exception as exc:  # unreadable, corrupt, wrong permissions: the user must act
        raise LocalFileError(f"cannot use key file {key_file}: {exc}") from None


def _client_id(given: str | None, base: str, key: Any) -> str:
    """The referee's MQTT client id base: as given, or ``base`` with a part
    derived from the referee key (unguessable, stable across restarts)."""
    from salvo import crypto

    return given or f"{base}-{crypto.client_id_tag(key)}"


def _config(*args: Any) -> Any:
    from salvo.engine import Config

    try:
        return Config(*args)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


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
@_key_file_option
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default="salvo-referee.db",
    show_default=True,
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
    help="Start even though the broker shows a game of an arena in progress that the state file does not hold"
    " (an emptied, replaced or deleted state file): a new game replaces it. Without it the referee refuses (exit 4).",
)
@click.option(
    "--allow-unbound-fire",
    is_flag=True,
    help="UNSAFE: also take v1 fire data {x, y} that names no target or game; such a signature can be"
    " replayed at another target, in another game or arena (docs/security.md). Off by default.",
)
@_log_level_option
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
    state: Path,
    client_id: str | None,
    teams: Path | None,
    sealed_joins_only: bool,
    fresh: bool,
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
    from salvo.referee import Referee, make_arenas

    _setup_logging(log_level)
    target = _parse_broker(broker, username, password)
    prefixes = _arena_prefixes(prefix, arenas)
    config = _config(placement_timeout, turn_timeout, reset_after, min_players, max_players, max_missed_turns)
    key = _referee_key(key_file)
    try:
        store = _open_state(state, fresh, target, prefixes)
        games = make_arenas(
            prefixes,
            config,
            seed,
            key,
            store,
            sealed_joins_only=sealed_joins_only,
            unbound_fire=allow_unbound_fire,
        )
    except (OSError, sqlite3.Error) as exc:
        raise LocalFileError(f"cannot use state file {state}: {exc}") from None
    if allow_unbound_fire:
        logging.getLogger("salvo").warning(
            "--allow-unbound-fire: v1 fire messages are accepted; their signatures can be replayed elsewhere"
        )
    _claim(target, games, store, fresh)
    registry = _registry(teams) if teams is not None else None
    service = Referee(
        games, target, client_id=_client_id(client_id, "salvo-referee", key), journal=store, registry=registry
    )
    try:
        _serve(service)
    finally:
        store.close()


def _open_state(state: Path, fresh: bool, target: Any, prefixes: list[str]) -> Any:
    """The state file; a damaged one (emptied, not SQLite, unreadable) is
    refused, or set aside for a new one with --fresh (never deleted)."""
    from salvo.store import Store, StoreDamaged, set_aside

    try:
        return Store(state)
    except StoreDamaged as exc:
        if not fresh:
            raise LocalFileError(
                f"refusing to start: {exc}.{_games_shown(target, prefixes)} Restore it from a backup"
                " (docs/reliability.md), or start with --fresh to set it aside and begin a new game"
            ) from None
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        moved = set_aside(state, stamp)
        logging.getLogger("salvo").warning("--fresh: %s; set aside as %s", exc, ", ".join(map(str, moved)))
        return Store(state)


def _games_shown(target: Any, prefixes: list[str]) -> str:
    """The games in progress the broker shows for these arenas, as a sentence
    (for a refusal: the organiser learns what the damaged file held)."""
    from salvo.ownership import survey

    try:
        seen = survey(target, prefixes, timeout=5.0)
    except (OSError, TimeoutError):
        return ""
    shown = [f"arena {p or '(default)'}: game {s.game_id} ({s.state})" for p, s in seen.items() if s.in_progress]
    return f" The broker shows games in progress it held: {'; '.join(shown)}." if shown else ""


def _claim(target: Any, arenas: list[Any], store: Any, fresh: bool) -> None:
    """Take the arenas, or stop before touching anything (see salvo.ownership)."""
    from salvo.ownership import claim

    try:
        problems = claim(target, arenas, store, fresh=fresh)
    except TimeoutError as exc:
        store.close()
        raise SalvoError(str(exc)) from None
    except PermissionError as exc:
        store.close()
        raise BrokerRefused(str(exc)) from None
    except OSError as exc:  # the state file cannot keep the lease
        store.close()
        raise LocalFileError(str(exc)) from None
    if problems:
        store.close()
        raise LocalFileError("refusing to start:\n  " + "\n  ".join(problems))


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
    _fail_on(service.fatal)


def _fail_on(fatal: Any) -> None:
    """The exit for why a service stopped on its own (see referee.Stop)."""
    if fatal is None:
        return
    from salvo.referee import Stop

    kind = {Stop.BROKER_REFUSED: BrokerRefused, Stop.STATE: LocalFileError, Stop.ARENA_TAKEN: LocalFileError}
    raise kind.get(fatal.kind, SalvoError)(fatal.reason)


@main.command()
@_broker_option
@click.option("--name", required=True, help="Team name (also the MQTT username unless --username).")
@click.option("--secret", required=True, envvar="SALVO_SECRET", help="The team's game secret.")
@click.option(
    "--strategy", type=click.Choice(["random", "hunt-target", "density"]), default="density", show_default=True
)
@click.option("--prefix", default="", help="Arena prefix.")
@click.option("--games", type=click.IntRange(min=1), help="Stop after this many games (default: play on forever).")
@click.option("--seed", type=int, help="Seed for the strategy's randomness.")
@click.option("--plain", is_flag=True, help="Join with plain JSON instead of a request sealed to /game/pubkey.")
@click.option(
    "--tournament",
    "follow",
    is_flag=True,
    help="Play wherever /tournament/assignments/NAME says, until the tournament is done.",
)
def bot(
    broker: str,
    username: str | None,
    password: str | None,
    name: str,
    secret: str,
    strategy: str,
    prefix: str,
    games: int | None,
    seed: int | None,
    plain: bool,
    follow: bool,
) -> None:
    """Play as one team with a built-in strategy.

    Joins, places a fleet, plays every turn, and after each reset joins the
    next game. Prints one summary line per game. With --tournament it plays
    in the arena the tournament assigns, game after game, until it is done.
    """
    from salvo.bots import make_strategy
    from salvo.client import JoinRefused, PlacementRefused, SalvoClient

    target = _parse_broker(broker, username, password)
    if follow:
        from salvo.tournament import follow as follow_tournament

        try:
            n = follow_tournament(
                target, name, secret, lambda: make_strategy(strategy, seed), on_game=lambda r: click.echo(r.line())
            )
        except (JoinRefused, PlacementRefused) as exc:
            raise SalvoError(f"the referee refused: {exc}") from None
        click.echo(f"tournament done: {n} games played")
        return
    try:
        client = SalvoClient(name, secret, target, prefix=prefix, sealed=not plain)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--name") from None
    try:
        client.connect()
    except ConnectionError as exc:
        raise (BrokerRefused if "refused" in str(exc) else SalvoError)(str(exc)) from None
    try:
        client.play(make_strategy(strategy, seed), games=games, on_game=lambda r: click.echo(r.line()))
    except (JoinRefused, PlacementRefused) as exc:
        raise SalvoError(f"the referee refused: {exc}") from None
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        client.close()


@main.command()
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
    from salvo.demo import run_demo

    if broker is not None:
        _parse_broker(broker, username, password)
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
        raise SalvoError(str(exc)) from None
    for i, winner in enumerate(result.winners, 1):
        click.echo(f"game {i}: winner {winner or 'nobody'}")


@main.group(invoke_without_command=True)
@click.option("--quick", is_flag=True, help="A small run (seconds, not minutes): checks the bench, not the product.")
@click.option(
    "--broker",
    envvar="SALVO_BENCH_BROKER",
    help="Measure through this broker (an open one; default: a private mosquitto started for the run).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default="bench-results.json",
    show_default=True,
    help="Where the figures go (JSON).",
)
@click.option(
    "--only",
    help="Comma-separated parts: engine, e2e, join, memory (default: all).",
)
@click.option("--check", is_flag=True, help="Exit with 1 when a measured figure misses its target (for CI gates).")
@click.pass_context
def bench(ctx: click.Context, quick: bool, broker: str | None, out: Path, only: str | None, check: bool) -> None:
    """Measure the product the way its users feel it, beside the machine's limits.

    Engine games per second and a 1024-team knockout; a shot's round trip
    through mosquitto and a referee process beside a bare paho echo; salvo
    throughput beside echo throughput; a burst of joins against the ideal
    (n x one key derivation / cores) and the latency of other messages
    meanwhile; the referee's memory. Prints a table with each target and
    writes the figures to --out. Without --broker it starts its own
    mosquitto. Subcommands measure other things (see below).
    """
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from salvo import perf
    from salvo.mqtt import Broker

    parts = None
    if only:
        parts = {p.strip() for p in only.split(",") if p.strip()}
        if unknown := parts - {"engine", "e2e", "join", "memory"}:
            raise click.BadParameter(f"unknown part(s) {', '.join(sorted(unknown))}", param_hint="--only")
    try:
        target = Broker.from_url(broker) if broker else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None
    console = Console(stderr=True)
    try:
        res = perf.run(target, quick, progress=lambda s: console.print(f"[dim]… {s}[/dim]"), only=parts)
    except (RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
        raise SalvoError(f"bench failed: {exc}") from None
    try:
        out.write_text(json.dumps(res.as_json(), indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise LocalFileError(f"cannot write {out}: {exc.strerror or exc}") from None
    table = Table(title=f"salvo bench{' --quick' if quick else ''} ({res.meta['cores']} cores)")
    for col in ("figure", "value", "target", ""):
        table.add_column(col, justify="left" if col == "figure" else "right")
    verdicts = res.verdicts()
    for key, value in res.figures.items():
        limit = perf.TARGETS.get(key)
        mark = "" if key not in verdicts else "[green]ok[/green]" if verdicts[key] else "[red]missed[/red]"
        table.add_row(key, f"{value:g}", f"{limit[1]} {limit[0]:g}" if limit else "", mark)
    Console().print(table)
    click.echo(f"wrote {out}")
    if check and (missed := [k for k, ok in verdicts.items() if not ok]):
        raise SalvoError(f"{len(missed)} target(s) missed: {', '.join(missed)}")


@bench.command("strategies")
@click.option("--games", type=click.IntRange(min=1), default=500, show_default=True, help="Fleets per strategy.")
@click.option("--shots-per-turn", type=click.IntRange(1, 5), default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_strategies(games: int, shots_per_turn: int, seed: int) -> None:
    """Shots each strategy needs to sink a full fleet, alone against it.

    The classic single-shooter benchmark (one shot per turn by default, exact
    hit/miss and sink feedback), on the same random fleets for every
    strategy. Published anchors for 5-4-3-3-2: random ~96, hunt/target ~66,
    with parity ~62, probability density ~42-45.
    """
    from rich.console import Console
    from rich.table import Table

    from salvo.bots.sim import solo_benchmark

    table = Table(title=f"{games} fleets, {shots_per_turn} shot(s) per turn")
    for col in ("strategy", "mean shots", "median", "best", "worst", "ms / decision"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for r in solo_benchmark(games, shots_per_turn, seed):
        table.add_row(
            r.strategy,
            f"{r.mean:.1f}",
            f"{r.median:.1f}",
            str(min(r.shots)),
            str(max(r.shots)),
            f"{r.ms_per_decision:.3f}",
        )
    Console().print(table)


@main.command()
@_broker_option
@click.option("--prefix", default="", help="Arena prefix of the referee under test.")
@click.option(
    "--referee-user",
    envvar="SALVO_REFEREE_USER",
    help="A login that may read every topic (the referee's), needed on a broker with access control.",
)
@click.option("--referee-password", envvar="SALVO_REFEREE_PASSWORD")
@click.option(
    "--team-credentials",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Three or more team logins, 'name:password' per line: enables the access-control cases.",
)
@click.option("--only", help="Comma-separated case groups (see --list).")
@click.option("--list", "list_cases", is_flag=True, help="List the cases and exit.")
def conformance(
    broker: str,
    username: str | None,
    password: str | None,
    prefix: str,
    referee_user: str | None,
    referee_password: str | None,
    team_credentials: Path | None,
    only: str | None,
    list_cases: bool,
) -> None:
    """Check a running referee against the protocol, as a black box.

    Plays two scripted games against the referee on the broker and judges
    only what it publishes: one line per case with the spec section it
    checks, then "N passed, N failed". Exits 1 if any case fails.

    The referee needs short timeouts, e.g.: salvo referee
    --placement-timeout 3 --turn-timeout 1.5 --reset-after 1 --max-players 6.
    Also runnable as: pytest --pyargs salvo.conformance --broker URL ...
    """
    from salvo.conformance.cases import CASES, GROUPS
    from salvo.conformance.suite import RECOMMENDED, Options, read_team_credentials, run_suite, summary

    if list_cases:
        for case in CASES.values():
            click.echo(f"§{case.section:<4} {case.id:<26} {case.title}")
        return
    groups = set(only.split(",")) if only else None
    if groups and (unknown := groups - set(GROUPS)):
        raise click.BadParameter(f"unknown groups {sorted(unknown)}; groups: {', '.join(GROUPS)}", param_hint="--only")
    options = Options(
        broker=_parse_broker(broker, username, password),
        prefix=prefix,
        referee_login=(referee_user, referee_password or "") if referee_user else None,
        teams=read_team_credentials(team_credentials.read_text()) if team_credentials else [],
        groups=groups,
    )
    click.echo(f"salvo conformance: referee at {options.broker.url}, arena {prefix or '(no prefix)'}")
    click.echo(f"needs a referee started like: {RECOMMENDED}")
    try:
        results = run_suite(options, report=lambda r: click.echo(r.line()))
    except ConnectionError as exc:
        raise (BrokerRefused if "refused" in str(exc) else SalvoError)(str(exc)) from None
    click.echo(summary(results))
    if any(r.status == "fail" for r in results):
        raise SalvoError("the referee does not conform")


@main.group()
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
def journal_export(out: Any, state: Path, arena: str, game_no: int | None, with_keys: bool) -> None:
    """Write one game's events as JSON lines (use - for stdout).

    The first line describes the game (arena, game number, seed, settings);
    every other line is an accepted event with its time. `salvo journal
    replay` plays it through the engine again.
    """
    import json as json_

    from salvo.engine import Game
    from salvo.store import Store, config_to_json, event_to_json
    from salvo.topics import Topics

    store = Store(state, writer=False)  # a referee may be running on it
    try:
        known = store.arena(arena)
        games = dict(store.games(arena))
        if known is None or not games:
            raise SalvoError(f"no games of arena {arena or '(default)'} in {state}")
        number = game_no if game_no is not None else max(games)
        if number not in games:
            raise SalvoError(f"no game {number}; games: {sorted(games)}")
        config = store.config_before(arena, number) or known[1]
        # The game's id, not the arena's key: the key would tell every later game's.
        game_id = Game(config, Topics(arena), known[0], game_no=number, id_key=known[2]).game_id
        header = {
            "type": "game",
            "arena": arena,
            "game": number,
            "game_id": game_id,
            "seed": known[0],
            "config": json_.loads(config_to_json(config)),
        }
        out.write(json_.dumps(header) + "\n")
        events = store.events(arena, number)
        for ev in events:
            out.write(json_.dumps(event_to_json(ev, redact_keys=not with_keys)) + "\n")
    finally:
        store.close()
    click.echo(f"exported game {number} of arena {arena or '(default)'}: {len(events)} events", err=True)


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
def journal_replay(source: Any) -> None:
    """Play an exported game through the engine and print how it went.

    Exits 1 if the engine rejects any journaled event (the journal does not
    match the rules).
    """
    import json as json_

    from salvo.engine import Game, Rejected
    from salvo.store import config_from_json, event_from_json
    from salvo.topics import Topics

    lines = [json_.loads(line) for line in source if line.strip()]
    if not lines or lines[0].get("type") != "game":
        raise SalvoError("not an exported game: the first line must be its description")
    head = lines[0]
    game = Game(
        config_from_json(json_.dumps(head["config"])),
        Topics(head["arena"]),
        head["seed"],
        game_no=head["game"],
        game_id=head.get("game_id"),
    )
    rejected = 0
    for line in lines[1:]:
        result = game.handle(event_from_json(line))
        if isinstance(result, Rejected):
            rejected += 1
            click.echo(f"rejected: {line} ({result.error.reason})")
    click.echo(
        f"game {head['game']} of arena {head['arena'] or '(default)'}: {len(lines) - 1} events, "
        f"{rejected} rejected; state {game.phase.value}, {game.turn} turns, winner {game.winner or '-'}"
    )
    t = game.topics
    for topic in (t.stats_summary, *(t.stats_player(n) for n in game.order)):
        if topic in game.retained:
            click.echo(f"{topic} {game.retained[topic]}")
    if rejected:
        raise SalvoError(f"{rejected} journaled events no longer apply")


@main.group()
def stress() -> None:
    """Load and abuse a referee: many arenas at once, garbage floods."""


@stress.command("arenas")
@_broker_option
@click.option("--arenas", "count", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--players", type=click.IntRange(2, 10), default=4, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def stress_arenas(broker: str, username: str | None, password: str | None, count: int, players: int, seed: int) -> None:
    """Many games at once in one referee process.

    Starts `salvo referee --arenas N` and N x PLAYERS SDK bots that play one
    game per arena, all at the same time; checks that every game ends with
    consistent results; reports the referee's peak memory. The login must be
    allowed everything (the referee's, or any on an open broker).
    """
    from salvo.stress import run_arenas

    result = run_arenas(_parse_broker(broker, username, password), count, players, seed)
    click.echo(
        f"{result.games_completed}/{result.arenas} games of {result.players} players completed correctly in "
        f"{result.seconds:.1f} s; referee peak RSS {result.referee_peak_rss_mb:.1f} MB"
    )
    for problem in result.problems:
        click.echo(f"problem: {problem}")
    if result.problems:
        raise SalvoError("not every game completed correctly")


@stress.command("flood")
@_broker_option
@click.option("--rate", type=click.IntRange(1), default=10_000, show_default=True, help="Garbage messages per second.")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=10.0, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def stress_flood(broker: str, username: str | None, password: str | None, rate: int, seconds: float, seed: int) -> None:
    """A garbage flood on every inbound topic while a game runs.

    The game must still complete; the referee's memory is sampled twice a
    second and its peak reported.
    """
    from salvo.stress import run_flood

    r = run_flood(_parse_broker(broker, username, password), rate, seconds, seed)
    click.echo(
        f"flood: {r.sent} garbage messages in {r.seconds:.0f} s ({r.rate_achieved}/s, asked {r.rate_asked}/s); "
        f"game completed: {r.game_completed} (winner {r.winner}); referee RSS {r.referee_rss_before_mb} MB before, "
        f"peak {r.referee_peak_rss_mb} MB; samples {r.referee_rss_samples_mb}; the referee received and rejected "
        f"{r.referee_rejected} (the broker drops QoS 0 a slow subscriber cannot take)"
    )
    for problem in r.problems:
        click.echo(f"problem: {problem}")
    if not r.game_completed:
        raise SalvoError("the game did not complete under the flood")


@stress.command("chaos")
@_broker_option
@click.option(
    "--own-broker",
    is_flag=True,
    help="Start throw-away mosquittos on loopback ports instead of --broker (the broker scenarios restart theirs).",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--games", type=click.IntRange(min=1), default=1, show_default=True, help="Games per scenario.")
@click.option(
    "--kills",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="kill -9s in the kill scenario: it plays more games until it has done them.",
)
@click.option(
    "--scenarios",
    default="kill,freeze,broker,broker-volatile,disk,damage,second",
    show_default=True,
    help="A comma-separated subset.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the referees' state files and logs here (default: a temporary directory, removed).",
)
@click.option(
    "--sample", is_flag=True, help="A bounded sample (what the test suite runs): fewer variants, shorter outages."
)
def stress_chaos(
    broker: str,
    username: str | None,
    password: str | None,
    own_broker: bool,
    seed: int,
    games: int,
    kills: int,
    scenarios: str,
    workdir: Path | None,
    sample: bool,
) -> None:
    """Games under fault injection, every published result checked.

    Three scripted teams whose fleets the harness knows play against a real
    referee process while it is killed (-9) at named points and at random
    instants, frozen (SIGSTOP), its broker restarted with and without
    persistence, its disk filled, its state file damaged, and a second
    referee started beside it. A model of the game predicts every published
    topic and judges what a watcher saw. Prints runs / survived / lost per
    fault and every violation with the messages around it; exits 1 on any
    violation. The login must be allowed everything; the disk scenario
    mounts a tmpfs (root) and is skipped otherwise.
    """
    import shutil
    import tempfile

    from salvo.chaos import Options, OwnBroker, run_chaos

    root = workdir or Path(tempfile.mkdtemp(prefix="salvo-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    try:
        with contextlib.ExitStack() as stack:
            if own_broker:
                target = stack.enter_context(OwnBroker.running())[0]
            else:
                target = _parse_broker(broker, username, password)
            own = OwnBroker.running if own_broker else None
            options = Options(target, root, seed, games, kills, own_broker=own, sample=sample)
            try:
                report = run_chaos(options, names)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--scenarios") from None
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    click.echo(report.text())
    if report.violations:
        raise SalvoError(f"{len(report.violations)} violations")


def _registry(path: Path) -> Registry:
    from salvo.teams import Registry, TeamsError

    if not path.exists():
        raise LocalFileError(f"no team registry at {path} (create it with: salvo teams add NAME --registry {path})")
    try:
        registry = Registry(path)
        logging.getLogger("salvo").info("admitting only the %d teams of %s", len(registry.teams), path)
    except (OSError, TeamsError) as exc:
        raise LocalFileError(str(exc)) from None
    return registry


_registry_option = click.option(
    "--registry",
    type=click.Path(dir_okay=False, path_type=Path),
    default="teams.json",
    show_default=True,
    envvar="SALVO_TEAMS",
    help="The referee's team registry (salvo referee --teams).",
)
_passwd_option = click.option(
    "--passwd",
    type=click.Path(dir_okay=False, path_type=Path),
    default="passwd",
    show_default=True,
    help="The broker's password file (mosquitto password_file).",
)


_acl_option = click.option(
    "--acl",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The broker's ACL (mosquitto acl_file), generated from the password file [default: mosquitto.acl next to it].",
)


def _reload_hint(*written: Path) -> None:
    click.echo(
        f"wrote {', '.join(map(str, written))}: make mosquitto re-read them with SIGHUP"
        " (docker compose kill -s HUP mosquitto; natively kill -HUP <its pid>)",
        err=True,
    )


@main.group()
def teams() -> None:
    """Provision teams for a tournament night: broker logins and game secrets.

    Every change rewrites the broker's password file and its ACL (one
    section per team: spec section 9); mosquitto re-reads both on SIGHUP.
    """


@teams.command("add")
@click.argument("name")
@_registry_option
@_passwd_option
@_acl_option
@click.option(
    "--broker-url",
    default="mqtts://localhost:8883",
    show_default=True,
    help="Broker address printed on the connection card: the TLS listener, mqtts://<venue address>:8883.",
)
@click.option(
    "--ca-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The CA that teams verify the broker with, for the card [default: tls/ca.crt next to the password file,"
    " where `salvo tls` puts it, if there].",
)
@click.option("--mqtt-password", help="Use this MQTT password (default: a fresh random one).")
@click.option("--secret", help="Use this game secret (default: a fresh random one).")
@click.option("--replace", is_flag=True, help="Issue new credentials to an existing team.")
def teams_add(
    name: str,
    registry: Path,
    passwd: Path,
    acl: Path | None,
    broker_url: str,
    ca_file: Path | None,
    mqtt_password: str | None,
    secret: str | None,
    replace: bool,
) -> None:
    """Register team NAME and print its connection card.

    Writes the team's MQTT login to the broker's password file (mosquitto's
    $7$ format) and its rights to the ACL beside it (mosquitto re-reads both
    on SIGHUP), and a verifier of its game secret to the registry (a running
    referee picks it up at once). The card is the only place the two secrets
    are shown: hand it to the team, with the CA file it names.
    """
    from salvo.teams import TeamsError, add_team, default_acl_path

    tls_url = broker_url.startswith(("mqtts:", "ssl:", "wss:"))
    if ca_file is None and tls_url and (passwd.parent / "tls" / "ca.crt").exists():
        ca_file = passwd.parent / "tls" / "ca.crt"
    if ca_file is not None and not ca_file.exists():
        raise LocalFileError(f"no CA file at {ca_file} (make one with: salvo tls)")
    try:
        card = add_team(
            registry,
            passwd,
            name,
            broker=broker_url,
            ca_file=ca_file,
            mqtt_password=mqtt_password,
            secret=secret,
            replace=replace,
            acl=acl,
        )
    except TeamsError as exc:
        raise SalvoError(str(exc)) from None
    except OSError as exc:
        raise LocalFileError(str(exc)) from None
    click.echo(card.text(), nl=False)
    if not tls_url:
        click.echo(
            f"warning: {broker_url} is plain text: the team's MQTT password (and a plain join's secret) cross"
            " the network readable; hand out the TLS listener, mqtts://HOST:8883",
            err=True,
        )
    elif card.ca_file is None:
        click.echo("note: no CA file on the card: the team's client will trust only the system's CAs", err=True)
    else:
        click.echo(f"hand the team {ca_file} with the card (never ca.key or server.key)", err=True)
    _reload_hint(passwd, acl or default_acl_path(passwd))


@teams.command("list")
@_registry_option
@_passwd_option
def teams_list(registry: Path, passwd: Path) -> None:
    """List the registered teams (no secrets: only hashes are stored)."""
    from salvo.teams import REFEREE_USER, Registry, TeamsError, read_passwd

    try:
        known = Registry(registry).teams
        logins = read_passwd(passwd)
    except (OSError, TeamsError) as exc:
        raise LocalFileError(str(exc)) from None
    for name in sorted(known):
        login = "broker login ok" if name in logins else "NO BROKER LOGIN"
        click.echo(f"{name:<32}  added {known[name].added}  {login}")
    if REFEREE_USER in logins:
        click.echo(f"({REFEREE_USER} login present)")
    click.echo(f"{len(known)} teams")


@teams.command("remove")
@click.argument("name")
@_registry_option
@_passwd_option
@_acl_option
def teams_remove(name: str, registry: Path, passwd: Path, acl: Path | None) -> None:
    """Remove team NAME: its broker login, its ACL section, its registry entry."""
    from salvo.teams import TeamsError, default_acl_path, remove_team

    try:
        remove_team(registry, passwd, name, acl=acl)
    except TeamsError as exc:
        raise SalvoError(str(exc)) from None
    except OSError as exc:
        raise LocalFileError(str(exc)) from None
    click.echo(f"removed {name}")
    _reload_hint(passwd, acl or default_acl_path(passwd))


@teams.command("referee")
@_passwd_option
@_acl_option
@click.option("--password", help="Use this password (default: a fresh random one).")
def teams_referee(passwd: Path, acl: Path | None, password: str | None) -> None:
    """Create or change the referee's broker login; prints its password."""
    from salvo.teams import REFEREE_USER, default_acl_path, set_referee_login

    try:
        password = set_referee_login(passwd, password, acl=acl)
    except OSError as exc:
        raise LocalFileError(str(exc)) from None
    click.echo(f"{REFEREE_USER} password: {password}")
    _reload_hint(passwd, acl or default_acl_path(passwd))


@teams.command("acl")
@_passwd_option
@_acl_option
@click.option(
    "--arenas",
    help="The arena prefixes the rules cover: a count N (arena1..arenaN), comma-separated prefixes, or 'any'"
    " (default: what the ACL covers now; a new one: any). Naming them keeps teams from writing into"
    " namespaces no referee reads. Kept in the file: later `salvo teams` commands keep it.",
)
def teams_acl(passwd: Path, acl: Path | None, arenas: str | None) -> None:
    """Write the broker's ACL for the logins of a password file.

    For password files kept with mosquitto_passwd by hand: every login but
    the referee's is a team. (salvo teams add/remove/referee do this
    themselves.)
    """
    from salvo.teams import ANY_ARENA, KEEP, write_acl_from_passwd

    if not passwd.exists():
        raise LocalFileError(f"no password file at {passwd}")
    covered = KEEP if arenas is None else None if arenas == ANY_ARENA else _arena_prefixes("", arenas)
    try:
        path, skipped = write_acl_from_passwd(passwd, acl, covered)
    except OSError as exc:
        raise LocalFileError(str(exc)) from None
    for login in skipped:
        click.echo(f"warning: {login!r} cannot be a team name: it gets no rights at all", err=True)
    _reload_hint(path)


@main.command()
@_broker_option
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
@_key_file_option
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
@_log_level_option
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
    client_id: str,
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
    from salvo.errors import Code, Illegal
    from salvo.referee import Referee, make_arenas
    from salvo.store import Store
    from salvo.tournament import Director, State, ranking_text

    _setup_logging(log_level)
    target = _parse_broker(broker, username, password)
    registry = _registry(registry_path)
    teams = sorted(registry.teams)
    if len(teams) < 2:
        raise SalvoError(f"a tournament needs at least two registered teams; {registry_path} has {len(teams)}")
    prefixes = _arena_prefixes("", arenas)
    saved = State.load(state) if state.exists() else None
    if saved is not None and (saved.format != fmt or saved.teams != teams):
        raise SalvoError(
            f"{state} holds another tournament ({saved.format}, {len(saved.teams)} teams); use a new --state"
        )
    if no_show_after and no_show_after <= placement_timeout:
        raise click.BadParameter(
            f"must be longer than --placement-timeout ({placement_timeout:g}s): a slow placer is not a no-show",
            param_hint="--no-show-after",
        )
    if rounds is None:
        rounds = (len(teams) - 1 + len(teams) % 2) if fmt == "round-robin" else 3
    plan = saved or State(fmt, rounds, teams)
    config = _config(placement_timeout, turn_timeout, reset_after, 2, 2, 3)
    key = _referee_key(key_file)
    try:
        store = Store(referee_state)
        games = make_arenas(prefixes, config, None, key, store)
    except (OSError, sqlite3.Error) as exc:
        raise LocalFileError(f"cannot use state file {referee_state}: {exc}") from None
    _claim(target, games, store, False)
    roster: dict[str, set[str]] = {p: set() for p in prefixes}
    for arena in games:
        p = arena.topics.prefix

        def admit(name: str, secret: str, p: str = p) -> bool | None:
            verified = registry.admit(name, secret)
            if name not in roster[p]:
                raise Illegal(
                    Code.NOT_REGISTERED,
                    f"{name!r} is not scheduled in arena {p!r} now; see /tournament/assignments/{name}",
                )
            return verified

        arena.admit = admit
    service = Referee(
        games, target, client_id=_client_id(client_id, "salvo-tournament", key), journal=store, registry=registry
    )
    director = Director(
        broker=target,
        arenas=prefixes,
        state=plan,
        state_path=state,
        roster=roster,
        close_lobby=service.close_lobby,
        no_show_after=no_show_after or None,
    )
    adopted = director.adopt()  # before the referee reads the joins the broker kept for it
    service.start()
    if not service.wait_connected(30):
        service.stop()
        director.close()
        raise SalvoError(f"cannot reach the broker at {target.url}")
    signal.signal(signal.SIGTERM, lambda *_: director.stop.set())
    rows = []
    try:
        rows = director.run(adopted)
    except KeyboardInterrupt:
        director.stop.set()
    finally:
        stopped = director.stop.is_set()
        director.close()
        service.stop()
        store.close()
    if stopped:
        click.echo("stopped; start again with the same --state to carry on", err=True)
        raise SystemExit(ExitCode.FAILED)
    click.echo(ranking_text(rows))


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on (0.0.0.0: the whole venue).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@_broker_option
@_log_level_option
def spectate(host: str, port: int, broker: str, username: str | None, password: str | None, log_level: str) -> None:
    """Serve the live spectator page: arenas, turns, hits, sinks, winners, standings.

    This server reads the public topics of every arena from the broker
    (anonymously unless --username) and streams them to browsers as
    server-sent events: browsers never talk to the broker, and the page
    needs nothing from the internet. Put it on the projector: one page shows
    every arena and the tournament table.
    """
    from salvo.spectate import SpectatorServer

    _setup_logging(log_level)
    target = _parse_broker(broker, username, password)
    try:
        server = SpectatorServer((host, port), target)
    except OSError as exc:
        raise SalvoError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start()
    try:
        assert server.feed is not None
        server.feed.settled.wait(10)
        if server.feed.refused:
            raise BrokerRefused(server.feed.refused)
        click.echo(f"spectator page on {server.url} (broker: {target.url}); Ctrl-C stops")
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.close()


@main.command("tls")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/tls",
    show_default=True,
    help="Where ca.crt, ca.key, server.crt and server.key go (mosquitto.conf reads them from there).",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    help="A name or IP address teams reach the broker by (repeatable). localhost and 127.0.0.1 are always in.",
)
@click.option(
    "--days", type=click.IntRange(1, 825), default=365, show_default=True, help="Validity of the server certificate."
)
def tls(directory: Path, hosts: tuple[str, ...], days: int) -> None:
    """Make the broker's TLS certificate: a CA of your own, and a server
    certificate it signs for the addresses teams use (spec section 10).

    An existing CA in the directory is kept (the teams' ca.crt stays valid)
    and only the server certificate is issued again, e.g. for a new venue
    address. Hand ca.crt to every team (salvo teams add puts its fingerprint
    on the cards); ca.key and server.key never leave this machine. mosquitto
    re-reads the certificate on SIGHUP.
    """
    from salvo.tls import TlsError, issue

    try:
        issued = issue(directory, hosts, days=days)
    except TlsError as exc:
        raise SalvoError(str(exc)) from None
    except OSError as exc:
        raise LocalFileError(str(exc)) from None
    ca_state = "new" if issued.new_ca else "kept: the teams' copies stay valid"
    click.echo(f"CA:          {issued.ca_cert} ({ca_state}); its key {issued.ca_key} stays with you")
    click.echo(f"server:      {issued.server_cert} and {issued.server_key}, until {issued.not_after:%Y-%m-%d}")
    click.echo(f"names:       {', '.join(issued.hosts)}")
    click.echo(f"CA SHA-256:  {issued.ca_fingerprint}")
    click.echo(
        f"Hand out {issued.ca_cert} (salvo teams add puts it on the cards). Then make mosquitto re-read the"
        " certificate: docker compose kill -s HUP mosquitto (natively: kill -HUP <its pid>)."
    )
