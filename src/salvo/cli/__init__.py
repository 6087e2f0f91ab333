"""The ``salvo`` command line. Each subcommand's help is its docstring.

Exit codes: 0 success; 1 internal error or failed checks; 2 usage error;
3 the broker refused us (credentials, ACL); 4 a local file problem.

One module per group of commands; a command parses its options and calls
the domain, whose failures (:mod:`salvo.failures`) the main group turns
into exit codes by their class. Domain modules are imported inside the
commands, so that ``salvo --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

import click

from salvo.cli import bench, conformance, journal, night, play, referee, stress, teams, tls, tournament
from salvo.cli.common import ExitCode, exit_for
from salvo.failures import Failure

__all__ = ["ExitCode", "main"]


class _Main(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Failure as failure:
            raise exit_for(failure) from None


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="salvo", prog_name="salvo")
def main() -> None:
    """salvo - Battleship: Salvo over MQTT.

    The authoritative referee, plus the tools around it. Run
    `salvo COMMAND --help` for each command.
    """


for _command in (
    referee.referee,
    play.bot,
    play.demo,
    play.spectate,
    play.replay,
    bench.bench,
    conformance.conformance,
    journal.journal,
    stress.stress,
    teams.teams,
    tournament.tournament,
    tls.tls,
    night.night,
):
    main.add_command(_command)
