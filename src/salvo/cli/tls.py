"""``salvo tls``: the broker's TLS certificate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from salvo.cli.common import local_files


@click.command("tls")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/tls",
    show_default=True,
    envvar="SALVO_TLS_DIR",
    help="The CA: ca.crt (for the teams) and ca.key (for nobody).",
)
@click.option(
    "--broker-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/broker",
    show_default=True,
    envvar="SALVO_BROKER_DIR",
    help="The broker's server.crt and server.key (mosquitto.conf reads them there, beside passwd and the ACL).",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    envvar="SALVO_VENUE",
    help="A name or IP address teams reach the broker by (repeatable; SALVO_VENUE: space-separated)."
    " localhost and 127.0.0.1 are always in.",
)
@click.option(
    "--days", type=click.IntRange(1, 825), default=365, show_default=True, help="Validity of the server certificate."
)
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON (paths, names, fingerprint).")
def tls(directory: Path, broker_dir: Path, hosts: tuple[str, ...], days: int, as_json: bool) -> None:
    """Make the broker's TLS certificate: a CA of your own, and a server
    certificate it signs for the addresses teams use (spec section 9).

    An existing CA in the directory is kept (the teams' ca.crt stays valid)
    and only the server certificate is issued again, e.g. for a new venue
    address. Hand ca.crt to every team (salvo teams add puts its fingerprint
    on the cards); ca.key and server.key never leave this machine. mosquitto
    re-reads the certificate on SIGHUP.
    """
    from salvo.organiser.tls import issue

    with local_files():
        issued = issue(directory, hosts, days=days, server_dir=broker_dir)
    if as_json:
        made = {
            "ca_file": str(issued.ca_cert),
            "ca_key": str(issued.ca_key),
            "new_ca": issued.new_ca,
            "ca_sha256": issued.ca_fingerprint,
            "server_cert": str(issued.server_cert),
            "server_key": str(issued.server_key),
            "hosts": list(issued.hosts),
            "not_after": issued.not_after.isoformat(),
        }
        click.echo(json.dumps(made, indent=2))
        return
    ca_state = "new" if issued.new_ca else "kept: the teams' copies stay valid"
    click.echo(f"CA:          {issued.ca_cert} ({ca_state}); its key {issued.ca_key} stays with you")
    click.echo(f"server:      {issued.server_cert} and {issued.server_key}, until {issued.not_after:%Y-%m-%d}")
    click.echo(f"names:       {', '.join(issued.hosts)}")
    click.echo(f"CA SHA-256:  {issued.ca_fingerprint}")
    click.echo(
        f"Hand out {issued.ca_cert} (salvo teams add puts it on the cards). Then make mosquitto re-read the"
        " certificate: docker compose kill -s HUP mosquitto (natively: kill -HUP <its pid>)."
    )
