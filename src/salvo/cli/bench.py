"""``salvo bench``: measure the product, and the strategies."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from salvo.cli.common import CommandFailed, LocalFileError

#: What ``--only`` may name (see salvo.tools.perf.run).
PARTS = ("engine", "paho", "e2e", "join", "memory")


@click.group(invoke_without_command=True)
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
    help="Comma-separated parts: engine, paho, e2e, join, memory (default: all).",
)
@click.option("--check", is_flag=True, help="Exit with 1 when a measured figure misses its target (for CI gates).")
@click.option(
    "--referee-log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="The e2e referee's --log-level (info: a line per accepted message, as `salvo referee` runs by default).",
)
@click.pass_context
def bench(
    ctx: click.Context,
    quick: bool,
    broker: str | None,
    out: Path,
    only: str | None,
    check: bool,
    referee_log_level: str,
) -> None:
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
    from salvo.net.mqtt import Broker
    from salvo.tools import perf

    parts = None
    if only:
        parts = {p.strip() for p in only.split(",") if p.strip()}
        if unknown := parts - set(PARTS):
            raise click.BadParameter(f"unknown part(s) {', '.join(sorted(unknown))}", param_hint="--only")
    try:
        target = Broker.from_url(broker) if broker else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None
    console = _console()
    try:
        res = perf.run(
            target,
            quick,
            progress=lambda s: console.print(f"[dim]… {s}[/dim]"),
            only=parts,
            referee_log_level=referee_log_level,
        )
    except (RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
        raise CommandFailed(f"bench failed: {exc}") from None
    _report(res, f"salvo bench{' --quick' if quick else ''} ({res.meta['cores']} cores)", out, check)


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

    from salvo.tools.sim import solo_benchmark

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


@bench.command("scale")
@click.option("--quick", is_flag=True, help="A small run (20 arenas, 1 and 2 processes): checks the bench.")
@click.option("--arenas", type=click.IntRange(min=3), help="Arenas in the one process (default 1000; --quick 20).")
@click.option(
    "--broker",
    envvar="SALVO_BENCH_BROKER",
    help="Measure through this broker, or a cluster's nodes comma-separated (an open one; default: a private"
    " mosquitto started for the run).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default="bench-scale.json",
    show_default=True,
    help="Where the figures go (JSON).",
)
@click.option(
    "--nats",
    is_flag=True,
    help="Measure through a three-node NATS cluster (JetStream, MQTT) started for the run on loopback.",
)
@click.option("--check", is_flag=True, help="Exit with 1 when a measured figure misses its target.")
def bench_scale(quick: bool, arenas: int | None, broker: str | None, out: Path, nats: bool, check: bool) -> None:
    """Arenas per referee process, one busy arena among idle ones, SIGTERM
    at that load, and salvo throughput across 1, 2 and 4 processes.

    One process takes N arenas (default 1000): the time until all say 'up',
    memory per arena, idle CPU. In one arena two bench teams fire shot
    after shot (each round trip beside a bare echo's through the same
    broker), then SDK bots play a whole game in the last arena. SIGTERM
    then: seconds to exit, and every arena must read 'down'. Last, pipelined
    salvos in 8 arenas shared out to 1, 2 and 4 referee processes.
    """
    from salvo.net.mqtt import Broker
    from salvo.tools.perf.results import Results
    from salvo.tools.perf.scale_bench import TARGETS, ScalePlan, run_scale

    try:
        target = Broker.from_url(broker) if broker else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None
    plan = ScalePlan.make(quick, arenas)
    res = Results(dict(TARGETS))
    if quick or (arenas is not None and arenas < 1000):
        res.targets.pop("scale.arenas_up")  # judged only on the run it names
    res.meta.update(quick=quick, cores=os.cpu_count() or 1, when=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    _raise_fd_limit()
    console = _console()
    try:
        with _nats_cluster() if nats else _private(target) as (own, pids):
            res.meta["broker"] = "a three-node NATS cluster" if nats else own.url
            run_scale(own, res, plan, progress=lambda s: console.print(f"[dim]… {s}[/dim]"), broker_pids=pids)
    except (RuntimeError, TimeoutError, ConnectionError, OSError) as exc:
        raise CommandFailed(f"bench failed: {exc}") from None
    _report(res, f"salvo bench scale{' --quick' if quick else ''} ({res.meta['cores']} cores)", out, check)


@contextlib.contextmanager
def _nats_cluster() -> Iterator[tuple[Any, list[int]]]:
    """A three-node NATS cluster for the run, and its servers' pids."""
    from salvo.tools.natscluster import NatsCluster

    with NatsCluster(3) as cluster:
        yield cluster.broker(), [proc.pid for proc in cluster.procs.values()]


@contextlib.contextmanager
def _private(target: Any) -> Iterator[tuple[Any, list[int]]]:
    """The broker given (its processes unknown), or a private mosquitto."""
    from salvo.tools.perf import contextmanager_or

    with contextmanager_or(target) as own:
        yield own, []


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _raise_fd_limit() -> None:
    """The private broker is our child: a thousand arenas' two thousand
    connections need more descriptors than the usual soft limit of 1024."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def _report(res: Any, title: str, out: Path, check: bool) -> None:
    """The figures as a table against their targets, and to ``out`` as JSON."""
    from rich.console import Console
    from rich.table import Table

    try:
        out.write_text(json.dumps(res.as_json(), indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise LocalFileError(f"cannot write {out}: {exc.strerror or exc}") from None
    table = Table(title=title)
    for col in ("figure", "value", "target", ""):
        table.add_column(col, justify="left" if col == "figure" else "right")
    verdicts = res.verdicts()
    for key, value in res.figures.items():
        limit = res.targets.get(key)
        mark = "" if key not in verdicts else "[green]ok[/green]" if verdicts[key] else "[red]missed[/red]"
        table.add_row(key, f"{value:g}", f"{limit[1]} {limit[0]:g}" if limit else "", mark)
    Console().print(table)
    click.echo(f"wrote {out}")
    if check and (missed := [k for k, ok in verdicts.items() if not ok]):
        raise CommandFailed(f"{len(missed)} target(s) missed: {', '.join(missed)}")
