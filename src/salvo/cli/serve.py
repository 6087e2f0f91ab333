"""What the referee's and the director's commands share beyond their
options (:mod:`salvo.cli.common`): the broker ACL check and the game's
settings. Apart from common because these import the organiser and the
game, which the team's install (sdk/pyproject.toml) does not carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from salvo.game import defaults

if TYPE_CHECKING:
    from salvo.game.events import Config


def check_acl(acl: Path | None, prefixes: list[str]) -> None:
    """Refuse (usage error) arenas the broker's ACL does not open to teams:
    their joins and shots would be dropped by the broker, and the teams would
    wait in silence. No ACL given: nothing to check."""
    if acl is None:
        return
    from salvo.organiser.teams import acl_arenas

    if not acl.exists():
        raise click.UsageError(f"no broker ACL at {acl} (salvo teams referee/add write it)")
    opened = acl_arenas(acl)
    if opened is None:
        return  # "arenas: any"
    missing = [p or "(no prefix)" for p in prefixes if p not in opened]
    if missing:
        raise click.UsageError(
            f"the broker's ACL {acl} opens {', '.join(opened) or 'no arena'} to teams, not {', '.join(missing)}:"
            " teams could not play there. Run only the arenas it opens, or open these too: with compose,"
            " docker compose run --rm salvo teams acl (it reads SALVO_ARENAS), then docker compose kill -s HUP"
            f" mosquitto; natively, salvo teams acl --arenas {','.join(p or '-' for p in prefixes)} --passwd"
            f" PASSWD --acl {acl}, then SIGHUP mosquitto"
        )


def game_config(**settings: Any) -> Config:
    """The engine's settings (:class:`~salvo.game.events.Config`'s fields, by
    name) from the options; inconsistent ones: usage error."""
    from salvo.game.events import Config

    try:
        return Config(**settings)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


#: The referee's and the director's: slower play for the room.
pace_option = click.option(
    "--pace",
    type=click.FloatRange(min=0, max=3600),
    default=defaults.PACE_S,
    show_default=True,
    envvar="SALVO_PACE",
    help="Seconds between a salvo's results and the next turn, for spectators (nobody fires meanwhile;"
    " the turn timeout starts with the turn).",
)
