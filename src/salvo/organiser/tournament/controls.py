"""What an organiser can do to a running tournament, in one place: the
actions, their arguments, and the errors they give. The console (web) and the
``salvo tournament`` commands both go through :class:`Controls`; the director
implements it and records every applied action in its state (the audit).

A control never half-applies: it is checked against the state first and
refused with a :class:`ControlError` (a machine ``code`` and a reason) that
changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Protocol


@dataclass(frozen=True)
class Action:
    name: str
    #: argument name -> its kind: "arena", "team", "game" (an index into the
    #: results as ``status()["games"]`` numbers them), "seconds", "text",
    #: "winner" (a team or "" for a draw)
    args: dict[str, str]
    help: str


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("pause", {}, "No new game is assigned until resume; games in progress play on."),
        Action("resume", {}, "Assign games again."),
        Action("pause-game", {"arena": "arena"}, "Stop the clock of the game in an arena (teams see it paused)."),
        Action("resume-game", {"arena": "arena"}, "Start its clock again where it stopped."),
        Action("extra-time", {"arena": "arena", "seconds": "seconds"}, "More time on the running deadline."),
        Action(
            "abort-game",
            {"arena": "arena", "reason": "text"},
            "End the game in an arena without a result; the pair plays again later.",
        ),
        Action(
            "clear-arena",
            {"arena": "arena", "reason": "text"},
            "Send everybody away from an arena, whatever is there: a scheduled game is aborted (played again"
            " later); anything else (a lobby nobody was assigned to, a game no fixture started) is ended.",
        ),
        Action("void-game", {"game": "game", "reason": "text"}, "Discard a recorded result; the pair plays again."),
        Action(
            "override",
            {"game": "game", "winner": "winner", "reason": "text"},
            "Set the result of a recorded game (audited).",
        ),
        Action(
            "withdraw",
            {"team": "team", "reason": "text"},
            "Take a team out: its game in progress and every remaining game are forfeited at once.",
        ),
        Action("admit-late", {"team": "team"}, "A team registered after the start plays the remaining rounds."),
        Action("refuse-late", {"team": "team"}, "A team registered after the start is told it is not in this one."),
    )
}


#: A refusal's machine code: snake_case like the protocol's (salvo.spec.errors.Code).
CODE_RE: Final = re.compile(r"[a-z]+(_[a-z]+)*")


class ControlError(Exception):
    """A control refused: nothing changed."""

    def __init__(self, code: str, reason: str) -> None:
        if not CODE_RE.fullmatch(code):  # snake_case, as the protocol's codes
            raise ValueError(f"control code {code!r} is not snake_case")
        super().__init__(reason)
        self.code = code
        self.reason = reason

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "reason": self.reason}


class Controls(Protocol):
    """The director as the organiser's tools see it (thread-safe)."""

    def status(self) -> dict[str, Any]:
        """Everything the console shows, JSON-able (see docs/tournament-night.md, "status")."""

    def apply(self, action: str, args: dict[str, Any], by: str) -> dict[str, Any]:
        """Apply one of :data:`ACTIONS`; its audit entry. Raises ControlError."""

    def export_json(self) -> dict[str, Any]:
        """Every game and per-team statistics (what ``salvo tournament export`` writes)."""

    def export_csv(self, what: str) -> str:
        """``what`` = "games" or "teams": the same as CSV."""
