"""``salvo conformance``: check a running referee against the protocol."""

from __future__ import annotations

from pathlib import Path

import click

from salvo.cli.common import CommandFailed, broker_option, connection_exits, parse_broker


@click.command()
@broker_option
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
    from salvo.tools.conformance.cases import CASES, GROUPS
    from salvo.tools.conformance.suite import RECOMMENDED, Options, read_team_credentials, run_suite, summary

    if list_cases:
        for case in CASES.values():
            click.echo(f"§{case.section:<4} {case.id:<26} {case.title}")
        return
    groups = set(only.split(",")) if only else None
    if groups and (unknown := groups - set(GROUPS)):
        raise click.BadParameter(f"unknown groups {sorted(unknown)}; groups: {', '.join(GROUPS)}", param_hint="--only")
    options = Options(
        broker=parse_broker(broker, username, password),
        prefix=prefix,
        referee_login=(referee_user, referee_password or "") if referee_user else None,
        teams=read_team_credentials(team_credentials.read_text()) if team_credentials else [],
        groups=groups,
    )
    click.echo(f"salvo conformance: referee at {options.broker.url}, arena {prefix or '(no prefix)'}")
    click.echo(f"needs a referee started like: {RECOMMENDED}")
    with connection_exits():
        results = run_suite(options, report=lambda r: click.echo(r.line()))
    click.echo(summary(results))
    if any(r.status == "fail" for r in results):
        raise CommandFailed("the referee does not conform")
