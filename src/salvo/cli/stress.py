"""``salvo stress``: load and abuse a referee."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from salvo.cli.common import CommandFailed, broker_option, parse_broker


@click.group()
def stress() -> None:
    """Load and abuse a referee: many arenas at once, garbage floods."""


@stress.command("arenas")
@broker_option
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
    from salvo.tools.stress import run_arenas

    result = run_arenas(parse_broker(broker, username, password), count, players, seed)
    click.echo(
        f"{result.games_completed}/{result.arenas} games of {result.players} players completed correctly in "
        f"{result.seconds:.1f} s; referee peak RSS {result.referee_peak_rss_mb:.1f} MB"
    )
    for problem in result.problems:
        click.echo(f"problem: {problem}")
    if result.problems:
        raise CommandFailed("not every game completed correctly")


@stress.command("flood")
@broker_option
@click.option("--rate", type=click.IntRange(1), default=10_000, show_default=True, help="Garbage messages per second.")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=10.0, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def stress_flood(broker: str, username: str | None, password: str | None, rate: int, seconds: float, seed: int) -> None:
    """A garbage flood on every inbound topic while a game runs.

    The game must still complete; the referee's memory is sampled twice a
    second and its peak reported.
    """
    from salvo.tools.stress import run_flood

    r = run_flood(parse_broker(broker, username, password), rate, seconds, seed)
    click.echo(
        f"flood: {r.sent} garbage messages in {r.seconds:.0f} s ({r.rate_achieved}/s, asked {r.rate_asked}/s); "
        f"game completed: {r.game_completed} (winner {r.winner}); referee RSS {r.referee_rss_before_mb} MB before, "
        f"peak {r.referee_peak_rss_mb} MB; samples {r.referee_rss_samples_mb}; the referee received and rejected "
        f"{r.referee_rejected} (the broker drops QoS 0 a slow subscriber cannot take)"
    )
    for problem in r.problems:
        click.echo(f"problem: {problem}")
    if not r.game_completed:
        raise CommandFailed("the game did not complete under the flood")


@stress.command("chaos")
@broker_option
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
    default="kill,freeze,broker,broker-volatile,disk,damage,second,split,reset,backup,stall",
    show_default=True,
    help="A comma-separated subset; nats (opt-in: a three-node NATS cluster started for it, minutes a game) too.",
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
    persistence, its disk filled, its state file damaged, a second referee
    started beside it, frozen past its last will while another takes its
    arena over (split), killed between journaling a reset and publishing it
    (reset), restarted on a restored backup or a copy of its live file
    (backup), and its broker frozen for 6-15 s (stall); opt-in, on a
    three-node NATS cluster started for the run, the node under the referee
    or the teams killed (nats). A model of the game predicts every published
    topic and judges what a watcher saw. Prints runs / survived / lost per
    fault and every violation with the messages around it; exits 1 on any
    violation. The login must be allowed everything; the disk scenario
    mounts a tmpfs (root) and is skipped otherwise, nats without nats-server.
    """
    import shutil
    import tempfile

    from salvo.tools.chaos import Options, run_chaos, throwaway_broker

    root = workdir or Path(tempfile.mkdtemp(prefix="salvo-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    try:
        with contextlib.ExitStack() as stack:
            if own_broker:
                target = stack.enter_context(throwaway_broker())[0]
            else:
                target = parse_broker(broker, username, password)
            own = throwaway_broker if own_broker else None
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
        raise CommandFailed(f"{len(report.violations)} violations")
