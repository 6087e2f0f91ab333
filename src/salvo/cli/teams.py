"""``salvo teams``: provision teams (broker logins, ACL, game secrets)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from salvo.cli.common import LocalFileError, arena_prefixes, local_files

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
    envvar="SALVO_PASSWD",
    help="The broker's password file (mosquitto password_file; data/broker/passwd in the guide).",
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


@click.group()
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
    envvar="SALVO_CARD_BROKER",
    help="Broker address printed on the connection card: the TLS listener, mqtts://<venue address>:8883.",
)
@click.option(
    "--ca-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The CA that teams verify the broker with, for the card [default: data/tls/ca.crt when the password file"
    " is data/broker/passwd, where `salvo tls` puts them, if there].",
)
@click.option("--mqtt-password", help="Use this MQTT password (default: a fresh random one).")
@click.option("--secret", help="Use this game secret (default: a fresh random one).")
@click.option("--replace", is_flag=True, help="Issue new credentials to an existing team.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the card as JSON (brokers, login, game secret, CA file and fingerprint, arena, tournament topic).",
)
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
    as_json: bool,
) -> None:
    """Register team NAME and print its connection card (--json: as JSON,
    for a team's automation; notes go to stderr either way).

    Writes the team's MQTT login to the broker's password file (mosquitto's
    $7$ format) and its rights to the ACL beside it (mosquitto re-reads both
    on SIGHUP), and a verifier of its game secret to the registry (a running
    referee picks it up at once). The card is the only place the two secrets
    are shown: hand it to the team, with the CA file it names.
    """
    from salvo.organiser.teams import add_team, card_ca_file, default_acl_path, is_tls_url

    with local_files():
        ca_file = card_ca_file(broker_url, passwd, ca_file)
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
    click.echo(json.dumps(card.as_json(), indent=2) if as_json else card.text(), nl=not as_json)
    if not is_tls_url(broker_url):
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
    from salvo.organiser.teams import REFEREE_USER, read_passwd
    from salvo.referee.admission import Registry, TeamsError

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
    from salvo.organiser.teams import default_acl_path, remove_team

    with local_files():
        remove_team(registry, passwd, name, acl=acl)
    click.echo(f"removed {name}")
    _reload_hint(passwd, acl or default_acl_path(passwd))


@teams.command("referee")
@_passwd_option
@_acl_option
@click.option("--password", help="Use this password (default: a fresh random one).")
def teams_referee(passwd: Path, acl: Path | None, password: str | None) -> None:
    """Create or change the referee's broker login; prints its password."""
    from salvo.organiser.teams import REFEREE_USER, default_acl_path, set_referee_login

    with local_files():
        password = set_referee_login(passwd, password, acl=acl)
    click.echo(f"{REFEREE_USER} password: {password}")
    _reload_hint(passwd, acl or default_acl_path(passwd))


@teams.command("acl")
@_passwd_option
@_acl_option
@click.option(
    "--arenas",
    envvar="SALVO_ARENAS",
    help="The arenas the rules cover: a count N (arena1..arenaN), comma-separated prefixes and ranges ('-' is the"
    " unprefixed arena), or 'any' (default: what the ACL covers now; a new one: any). Naming them keeps teams from"
    " writing into namespaces no referee reads. Kept in the file: later `salvo teams` commands keep it.",
)
def teams_acl(passwd: Path, acl: Path | None, arenas: str | None) -> None:
    """Write the broker's ACL for the logins of a password file.

    For password files kept with mosquitto_passwd by hand: every login but
    the referee's is a team. (salvo teams add/remove/referee do this
    themselves.)
    """
    from salvo.organiser.teams import ANY_ARENA, KEEP, UNPREFIXED, write_acl_from_passwd

    covered: Sequence[str] | None
    if arenas is None or arenas == ANY_ARENA:
        covered = KEEP if arenas is None else None
    else:
        items = [item.strip() for item in arenas.split(",")]
        named = ",".join(item for item in items if item != UNPREFIXED)
        covered = ([""] if UNPREFIXED in items else []) + (arena_prefixes("", named) if named else [])
    with local_files():
        path, skipped = write_acl_from_passwd(passwd, acl, covered)
    for login in skipped:
        click.echo(f"warning: {login!r} cannot be a team name: it gets no rights at all", err=True)
    _reload_hint(path)
