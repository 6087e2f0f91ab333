"""``salvo spec``: the protocol as a machine-readable document."""

from __future__ import annotations

from typing import Literal

import click


@click.group()
def spec() -> None:
    """The protocol (docs/protocol.md) as a machine-readable contract."""


@spec.command("asyncapi")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="YAML (docs/asyncapi.yaml is this output) or JSON.",
)
def asyncapi(fmt: Literal["yaml", "json"]) -> None:
    """Print the AsyncAPI 3.0 document of the protocol: every topic with its
    direction, QoS and retain flag, every payload's JSON Schema (generated
    from the wire models), the error codes, the security schemes.

    Regenerate the shipped copy with: salvo spec asyncapi > docs/asyncapi.yaml
    """
    from salvo.spec.asyncapi import render

    click.echo(render(fmt), nl=False)
