"""What the SDK (:mod:`salvo.sdk.client`) hands back: the referee's refusals
as exceptions carrying their :class:`~salvo.spec.errors.Code`, a turn to play,
and a finished game's record as this team saw it."""

from __future__ import annotations

from dataclasses import dataclass

from salvo.spec.errors import Code
from salvo.spec.wire import PlayerStats, StatsSummary

__all__ = ["GameAborted", "GameRecord", "JoinRefused", "LobbyClosed", "PlacementRefused", "SalvoError", "TurnToPlay"]


class SalvoError(Exception):
    """The referee refused something: ``code`` (a :class:`~salvo.spec.errors.Code`)
    says what, for a program to branch on; the message is the reason."""

    def __init__(self, reason: str, code: Code | None = None) -> None:
        super().__init__(reason)
        self.code = code


class JoinRefused(SalvoError):
    pass


class PlacementRefused(SalvoError):
    pass


class LobbyClosed(SalvoError):
    """The organiser sent everybody in the lobby away (a tournament game
    whose opponent never came); no game was played."""


class GameAborted(LobbyClosed):
    """The organiser ended the game in progress without a result
    (``game_aborted``); a tournament plays it again later."""


@dataclass(frozen=True)
class TurnToPlay:
    turn: int
    shots: int


@dataclass(frozen=True)
class GameRecord:
    """One finished game, as this team saw it."""

    game: int
    winner: str | None
    me: str
    summary: StatsSummary | None
    mine: PlayerStats | None

    def line(self, number: int | None = None) -> str:
        """One line: the game (``number``, or the arena's count of games
        seen), the winner, and this team's figures."""
        head = f"game {self.game if number is None else number}: winner {self.winner or 'nobody'}"
        if self.summary:
            head += f" after {self.summary.turns} turns"
        if self.mine is None:
            return head + f" | {self.me}: not in this game"
        m = self.mine
        return (
            f"{head} | {self.me}: place {m.place}, {m.shots} shots, {m.hits} hits ({m.accuracy:.0%}), "
            f"sank {m.ships_sunk}, lost {m.ships_lost}"
        )
