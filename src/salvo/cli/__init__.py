"""The ``salvo`` command line. Each subcommand's help is its docstring.

Exit codes: 0 success; 1 internal error or failed checks; 2 usage error;
3 the broker refused us (credentials, ACL); 4 a local file problem.

One module per group of commands; a command parses its options and calls
the domain, whose failures (:mod:`salvo.failures`) the main group turns
into exit codes by their class. Domain modules are imported inside the
commands, so that ``salvo --help`` stays fast.

The same ``salvo`` command comes with the team's install (the ``salvo-sdk``
distribution, sdk/pyproject.toml), which carries only :mod:`salvo.cli.bot`
of the command modules: a module that is not installed is left out of the
group, and its commands say which install has them.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from salvo.cli.common import ExitCode, exit_for
from salvo.failures import Failure

__all__ = ["ExitCode", "main"]

#: Every command, by the module of salvo.cli that defines it, in --help order.
COMMANDS: dict[str, tuple[str, ...]] = {
    "referee": ("referee",),
    "bot": ("bot",),
    "play": ("demo", "spectate", "replay"),
    "bench": ("bench",),
    "conformance": ("conformance",),
    "journal": ("journal",),
    "stress": ("stress",),
    "teams": ("teams",),
    "tournament": ("tournament",),
    "tls": ("tls",),
    "night": ("night",),
    "spec": ("spec",),
}


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("salvo", "salvo-sdk"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return "unknown"


def _print_version(ctx: click.Context, _param: click.Parameter, asked: bool) -> None:
    # Read when asked, not at import: importlib.metadata and the lookup cost
    # every command, --help too (import salvo.cli: 62.5 ms before, 56.8 after,
    # the best of 15 runs each, 2026-11-27). click's version_option takes the
    # version as a value, or guesses one distribution: not salvo or salvo-sdk.
    if asked and not ctx.resilient_parsing:
        click.echo(f"salvo, version {_installed_version()}")
        ctx.exit()


class _Main(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Failure as failure:
            raise exit_for(failure) from None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name not in self.commands and any(name in names for names in COMMANDS.values()):
            raise click.UsageError(
                f"`salvo {name}` is not in this install: it has the team's commands only (salvo-sdk, sdk/"
                "pyproject.toml). The organiser's and the referee's commands come with the full package:"
                " pip install . at the repository's root.",
                ctx,
            )
        return super().resolve_command(ctx, args)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main() -> None:
    """salvo - Battleship: Salvo over MQTT.

    The authoritative referee, plus the tools around it. Run
    `salvo COMMAND --help` for each command.
    """


for _module, _names in COMMANDS.items():
    try:
        _commands = importlib.import_module(f"salvo.cli.{_module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{_module}":
            raise  # the module is there but something it imports is not: a real error
        continue  # not installed: the team's install (salvo-sdk)
    for _name in _names:
        main.add_command(getattr(_commands, _name))
