"""The engine's vocabulary: its settings, the events it takes, the results
it gives, and the state it keeps of each player (:mod:`salvo.game.engine`
applies the events). No IO, no clock, no pydantic.

Every event is a NamedTuple (immutable, hashable, ``_replace``): one
:class:`Fire` is made per shot. Made with ``Fire(...)`` it costs 3,500
instructions (Python 3.11, callgrind), where a frozen slotted dataclass of
the same eight fields costs 12,700. NamedTuples compare as tuples: events
of two types with equal fields are ``==`` (compare types where it matters).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from salvo.game import defaults
from salvo.spec.errors import Rejection
from salvo.spec.payloads import Publish
from salvo.spec.rules import FLEET, SHIP_IDS, Placement


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The game's settings, by name only; their defaults are
    :mod:`salvo.game.defaults` (the CLI's options show the same)."""

    placement_timeout: float = defaults.PLACEMENT_TIMEOUT_S
    turn_timeout: float = defaults.TURN_TIMEOUT_S
    reset_after: float = defaults.RESET_AFTER_S
    min_players: int = defaults.MIN_PLAYERS
    max_players: int = defaults.MAX_PLAYERS
    max_missed_turns: int = defaults.MAX_MISSED_TURNS
    #: Seconds between a salvo's results and the next turn's announcement
    #: (the room's pace; 0: at once). Nobody may fire meanwhile, and the turn
    #: timeout starts only with the announcement.
    pace_s: float = defaults.PACE_S

    def __post_init__(self) -> None:
        if min(self.placement_timeout, self.turn_timeout, self.reset_after) <= 0:
            raise ValueError("timeouts must be positive")
        if not 0 <= self.pace_s <= 3600:
            raise ValueError("pace must be 0-3600 seconds")
        if not 2 <= self.min_players <= self.max_players:
            raise ValueError("need 2 <= min_players <= max_players")
        if self.max_missed_turns < 1:
            raise ValueError("max_missed_turns must be at least 1")


class Phase(enum.Enum):
    LOBBY = "lobby"
    TURN = "turn"
    OVER = "over"


class Termination(enum.Enum):
    """How a game ended, as published in ``/game/stats/summary``."""

    VICTORY = "victory"  # one player left, the others sunk
    FORFEIT = "forfeit"  # one player left, the last opponent dropped for missed turns
    DRAW = "draw"  # the last players went down in the same salvo


# -- events ---------------------------------------------------------------------


class Join(NamedTuple):
    name: str
    key: bytes
    now: float

    def __repr__(self) -> str:
        return f"Join(name={self.name!r}, now={self.now!r})"  # never the key: logs print events


class Place(NamedTuple):
    name: str
    ship: str
    placement: Placement
    now: float
    #: the sealed box's nonce: a placement delivered again is recognised
    nonce: bytes | None = None


class Fire(NamedTuple):
    """A shot signed by ``shooter`` (whose key opened the signature). ``turn``
    and ``game`` are what it was signed for (None: not bound, in-memory play
    or the unsafe v1 form); ``nonce`` the signature's nonce for replay
    protection (None without signatures)."""

    shooter: str
    target: str
    x: int
    y: int
    turn: int | None
    game: str | None
    nonce: bytes | None
    now: float


class Burn(NamedTuple):
    """A signature that opened under ``player``'s key but was rejected: its
    nonce is spent for the rest of the game all the same (v2)."""

    player: str
    nonce: bytes
    now: float
    #: why it was refused, for the journal's readers
    code: str = ""
    #: the refused message's topic and the reason told its sender: a restart
    #: that finds the report unpublished publishes it (salvo.arena.resume)
    topic: str = ""
    reason: str = ""
    #: (v2.1) what the report echoes of the refused shot: the start of its
    #: signature and its (target, x, y) when its data could be read
    signature: str = ""
    shot: tuple[str, int, int] | None = None


class Extend(NamedTuple):
    """Give the running deadline (turn or placement) ``seconds`` more: the
    time the referee was cut off from the broker, when nobody could act."""

    seconds: float
    now: float


class Tick(NamedTuple):
    now: float


class Configure(NamedTuple):
    """New settings from now on (a referee restarted with other flags).
    Journaled like every event, so a replay meets it at the same point."""

    config: Config
    now: float


class CloseLobby(NamedTuple):
    """The organiser sends everybody in the lobby away (a tournament game
    whose opponent never came). Only in the lobby: a game that has started
    is played out."""

    reason: str
    now: float


class Abandon(NamedTuple):
    """The organiser starts a new game over the one the journal holds, in
    any phase (``salvo referee --fresh``: the broker shows another game, the
    teams never saw this one), or ends the game in progress without a result
    (``Soon.abort_game``: ``tell``, each of its players is told why on
    their error topic, ``game_aborted``). Its retained topics are cleared."""

    reason: str
    now: float
    tell: bool = False


class Pause(NamedTuple):
    """The organiser stops the clock: the running deadline (placement, turn
    or reset) is held with the time it had left, and every deadline the game
    sets meanwhile (the next turn's, a join's) waits too. Messages are
    applied as usual; no timeout fires until :class:`Resume`."""

    reason: str
    now: float


class Resume(NamedTuple):
    """The clock runs again: the deadline is ``now`` + the time it had left."""

    now: float
    by: str = ""


class Paused(NamedTuple):
    """A stopped clock: why, the seconds its deadline has left, and that
    deadline as it stood when the clock stopped (what ``/game/deadline``
    keeps showing as ``at``)."""

    reason: str
    left: float
    at: float


Event = Join | Place | Fire | Tick | Configure | CloseLobby | Burn | Extend | Abandon | Pause | Resume


# -- results --------------------------------------------------------------------


@dataclass(slots=True)
class Accepted:
    """A slotted dataclass, not frozen and not a NamedTuple: the engine makes
    one per shot, and this kind is the cheapest to make (1,800 instructions;
    a NamedTuple 2,900, a frozen dataclass several times that)."""

    effects: list[Publish]
    #: What happened, in words: ``note % args`` when there are args. A shot's
    #: text is only formatted when someone reads :attr:`summary` (a log line),
    #: not for every shot of every in-memory game: that was a tenth of one.
    note: str
    args: tuple[object, ...] = ()

    @property
    def summary(self) -> str:
        return self.note % self.args if self.args else self.note

    def __str__(self) -> str:
        # What a log line shows: so that a Log can carry the result unformatted.
        return self.summary


@dataclass(frozen=True, slots=True)
class Rejected:
    error: Rejection


Result = Accepted | Rejected


# -- state ----------------------------------------------------------------------


class SalvoEntry(NamedTuple):
    """One salvo as it resolved, for the game record (``/game/record``):
    its shots as (target, cell, hit), its hits, the ships it sank as
    (owner, ship) and the players it defeated, each in announcement order."""

    turn: int
    player: str
    shots: list[tuple[str, int, bool]]
    hits: int
    sunk: Sequence[tuple[str, str]]
    defeated: Sequence[str]


@dataclass(slots=True)
class PlayerState:
    name: str
    key: bytes = field(repr=False)
    fleet: dict[str, Placement] = field(default_factory=dict)
    occupied: dict[int, str] = field(default_factory=dict)  # cell -> ship id
    damage: dict[str, set[int]] = field(default_factory=lambda: {s: set() for s in SHIP_IDS})
    sunk: list[str] = field(default_factory=list)
    shots: int = 0
    hits: int = 0
    ships_sunk: int = 0
    missed: int = 0
    defeated_in_turn: int | None = None
    reason: str | None = None  # "sunk" | "timeout" once defeated
    burned: int = 0  # nonces of rejected signatures spent this game
    placements: int = 0  # placements and moves this game
    #: The nonce of every signature (and sealed placement) that opened under
    #: this player's key this game: where it was taken (a shot's target;
    #: "name/ship" for a placement), or False when refused. Per player: a
    #: nonce is only ever unique under one key, and nobody may spend another's.
    nonces: dict[bytes, str | bool] = field(default_factory=dict)
    #: the name as a JSON string, for the payloads built on every turn
    quoted: str = ""
    #: this player's ``hit`` topic, published on every shot at them
    hit_topic: str = ""

    @property
    def complete(self) -> bool:
        return len(self.fleet) == len(FLEET)

    @property
    def afloat(self) -> int:
        return len(FLEET) - len(self.sunk)

    @property
    def defeated(self) -> bool:
        return self.defeated_in_turn is not None


def termination(participants: list[PlayerState], winner: str | None, turn: int) -> Termination:
    """How a game that ended in ``turn`` ended: a draw with nobody left, a
    forfeit when whoever went down last was dropped for missed turns."""
    if winner is None:
        return Termination.DRAW
    final = [p for p in participants if p.defeated_in_turn == turn]
    return Termination.FORFEIT if all(p.reason == "timeout" for p in final) else Termination.VICTORY


def places(participants: list[PlayerState]) -> list[int]:
    """Each participant's place: 1 + those who lasted longer (players
    defeated in the same turn share a place; the winner lasted longest)."""

    def lasted(q: PlayerState) -> float:
        return float("inf") if q.defeated_in_turn is None else q.defeated_in_turn

    return [1 + sum(lasted(q) > lasted(p) for q in participants) for p in participants]
