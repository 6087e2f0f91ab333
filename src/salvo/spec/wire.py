"""Pydantic models of every JSON payload on the wire, in and out.

Inbound parsers turn already-decoded JSON values into typed messages or raise
:class:`~salvo.spec.errors.Malformed` with a reason built from field locations and
pydantic's messages only - never from the input, so a secret is never echoed.
Outbound models describe what the referee publishes; the client SDK parses
with them and the tests check the engine's payloads against them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from salvo.spec.errors import Code, Malformed
from salvo.spec.rules import Orientation, Placement
from salvo.spec.topics import NAME_RE

_IN = ConfigDict(strict=True, extra="ignore", frozen=True)
_OUT = ConfigDict(strict=True, extra="ignore", frozen=True)
_COORDS_RE = re.compile(r"\s*(-?\d{1,6})\s*;\s*(-?\d{1,6})\s*", re.ASCII)
#: A join's optional ``request_id`` (v2): echoed on /game/errors with a refusal.
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
RequestId = Annotated[StrictStr, Field(pattern=f"^{REQUEST_ID_RE.pattern}$")]


def _reason(exc: ValidationError, what: str) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return f"invalid {what}: " + "; ".join(parts)


def _one_of(data: Any, names: tuple[str, str]) -> Any:
    """Accept either spelling of a key (``data``/``payload``, ``orientation``/
    ``Orientation``) but not both with different values."""
    if isinstance(data, dict) and names[1] in data:
        data = dict(data)
        alias = data.pop(names[1])
        if names[0] in data and data[names[0]] != alias:
            raise ValueError(f"both {names[0]!r} and {names[1]!r} given")
        data[names[0]] = alias
    return data


# -- inbound ------------------------------------------------------------------------


class JoinRequest(BaseModel):
    """``{"name", "secret", "request_id"?}`` on ``/game/request_participation``."""

    model_config = _IN
    name: StrictStr
    secret: Annotated[StrictStr, Field(min_length=1, max_length=1024)]
    request_id: RequestId | None = None
    #: (v2.1) the ``/game/id`` the joiner saw: a join for another game is refused
    game: Annotated[StrictStr, Field(max_length=64)] | None = None


def request_id_of(value: Any) -> str | None:
    """What a refusal of this join echoes as ``request_id``, whatever else is
    wrong with it, so the sender can tell the refusal is theirs: a valid id
    whole; (v2.1) an invalid one that is a string, cut to its first 64
    characters; anything else nothing."""
    rid = value.get("request_id") if isinstance(value, dict) else None
    return rid[:64] if isinstance(rid, str) else None


class XY(BaseModel):
    model_config = _IN
    x: StrictInt
    y: StrictInt


class PlacementMessage(BaseModel):
    """The plaintext of a sealed placement."""

    model_config = _IN
    coordinates: XY | StrictStr
    orientation: StrictStr

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return _one_of(data, ("orientation", "Orientation"))

    def to_placement(self) -> Placement:
        if isinstance(self.coordinates, XY):
            x, y = self.coordinates.x, self.coordinates.y
        else:
            m = _COORDS_RE.fullmatch(self.coordinates)
            if m is None:
                raise Malformed('invalid placement: coordinates must be "<x>;<y>" or {"x": <x>, "y": <y>}')
            x, y = int(m[1]), int(m[2])
        try:
            orientation = Orientation(self.orientation.upper())
        except ValueError:
            raise Malformed("invalid placement: orientation must be HORIZONTAL or VERTICAL") from None
        return Placement(x, y, orientation)


class SignedMessage(BaseModel):
    """``{"data": <JSON>, "signature": "<base64>"}``; ``payload`` is an alias."""

    model_config = _IN
    data: JsonValue
    signature: StrictStr

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        data = _one_of(data, ("data", "payload"))
        if isinstance(data, dict) and "data" in data and data["data"] is None:
            # JsonValue admits null, but a signed null carries no shot.
            raise ValueError("data must not be null")
        return data


class FireData(BaseModel):
    """The signed data of a fire message (v2): bound to its target, its turn
    and its game, all required, so a signature is good for one shot only."""

    model_config = _IN
    x: StrictInt
    y: StrictInt
    target: StrictStr
    turn: StrictInt
    game: Annotated[StrictStr, Field(max_length=64)]


class UnboundFireData(BaseModel):
    """The v1 form ``{x, y, turn?}``: accepted only behind the referee's
    ``--allow-unbound-fire`` (unsafe: the signature names no target or game)."""

    model_config = _IN
    x: StrictInt
    y: StrictInt
    turn: StrictInt | None = None


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], value: Any, what: str) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise Malformed(_reason(exc, what)) from None


#: (v2.1) A refused shot's coordinates are echoed when they fit a C ``int32_t``.
_INT32 = range(-(2**31), 2**31)


def shot_of(data: JsonValue, target: str) -> tuple[str, int, int] | None:
    """(v2.1) The shot a fire message's signed ``data`` asks for, as its
    refusal echoes it: the topic's ``target`` (a valid name) and the integer
    ``x`` and ``y`` read from the data itself; None when they cannot be read."""
    if not isinstance(data, dict):
        return None
    x, y = data.get("x"), data.get("y")
    if type(x) is not int or type(y) is not int or x not in _INT32 or y not in _INT32 or not NAME_RE.fullmatch(target):
        return None
    return target, x, y


def parse_join(value: Any) -> JoinRequest:
    return _parse(JoinRequest, value, "participation request")


def parse_placement(value: Any) -> Placement:
    return _parse(PlacementMessage, value, "placement").to_placement()


def parse_signed(value: Any) -> SignedMessage:
    return _parse(SignedMessage, value, "signed message")


def parse_fire(value: Any) -> FireData:
    return _parse(FireData, value, "fire data (v2: x, y, target, turn and game are required)")


def parse_unbound_fire(value: Any) -> UnboundFireData:
    return _parse(UnboundFireData, value, "fire data")


# -- outbound -----------------------------------------------------------------------


class Deadline(BaseModel):
    """``/game/deadline``: when the current phase times out (unix seconds).
    (salvo extension) ``paused``: the organiser stopped the clock; ``at`` is
    the deadline as it stood then, ``left`` the seconds it keeps."""

    model_config = _OUT
    phase: Literal["placement", "turn", "reset"]
    at: float = Field(strict=False)
    paused: StrictBool | None = None
    left: float | None = Field(default=None, strict=False)


class TurnInfo(BaseModel):
    """``/game/turn``."""

    model_config = _OUT
    turn: StrictInt
    player: StrictStr
    shots: StrictInt


class SalvoResult(BaseModel):
    """``/game/salvo``: the result of the salvo that just ended."""

    model_config = _OUT
    turn: StrictInt
    player: StrictStr
    shots: StrictInt
    hits: StrictInt


class Hit(BaseModel):
    """``/players/<target>/hit``: one accepted shot at the target. ``turn``
    and ``shot`` (from 1 in its salvo) are per game: (v2.1) ``game``, its
    ``/game/id``, makes ``(game, turn, shot)`` a shot's identity across
    games, so a client drops a duplicate by it."""

    model_config = _OUT
    x: StrictInt
    y: StrictInt
    turn: StrictInt
    shot: StrictInt
    #: (v2.1) absent from a v2 referee's hits
    game: StrictStr | None = None


class Shot(BaseModel):
    """(v2.1) The shot a fire refusal is about: the topic's target and the
    ``x``, ``y`` of the signed data (``turn`` and ``game`` are not repeated)."""

    model_config = _OUT
    target: StrictStr
    x: StrictInt
    y: StrictInt


class ErrorReport(BaseModel):
    """Every error topic: ``/game/errors``, ``/players/<n>/error``,
    ``/players/<n>/ships/<s>/error``. ``code`` is one of :class:`~salvo.spec.errors.Code`;
    ``request_id`` echoes a refused join's; (v2.1) a refused fire message's
    report carries the first 16 characters of its ``signature`` and, when
    its data could be read, its ``shot``."""

    model_config = _OUT
    topic: StrictStr
    error: StrictStr
    code: Code = Field(strict=False)
    request_id: StrictStr | None = None
    signature: StrictStr | None = None
    shot: Shot | None = None


class StatsSummary(BaseModel):
    """``/game/stats/summary``."""

    model_config = _OUT
    winner: StrictStr | None
    turns: StrictInt
    shots: StrictInt
    hits: StrictInt
    duration_s: float = Field(strict=False)
    termination: Literal["victory", "forfeit", "draw"]


class PlayerStats(BaseModel):
    """``/game/stats/players/<name>``."""

    model_config = _OUT
    place: StrictInt
    shots: StrictInt
    hits: StrictInt
    accuracy: float = Field(strict=False)
    ships_sunk: StrictInt
    ships_lost: StrictInt
    defeated_in_turn: StrictInt | None
    reason: Literal["sunk", "timeout"] | None


class RecordShip(BaseModel):
    """Where a ship lay, in ``/game/record``'s fleets."""

    model_config = _OUT
    x: StrictInt
    y: StrictInt
    orientation: Literal["HORIZONTAL", "VERTICAL"]


class RecordShot(BaseModel):
    """One accepted shot of a salvo in ``/game/record``."""

    model_config = _OUT
    target: StrictStr
    x: StrictInt
    y: StrictInt
    hit: StrictBool


class RecordSink(BaseModel):
    """A ship a salvo sank, in ``/game/record``."""

    model_config = _OUT
    owner: StrictStr
    ship: StrictStr


class RecordSalvo(BaseModel):
    """One salvo of ``/game/record``: its shots in order, its hits, the ships
    it sank and the players it defeated, in the order they were announced."""

    model_config = _OUT
    turn: StrictInt
    player: StrictStr
    shots: list[RecordShot]
    hits: StrictInt
    sunk: list[RecordSink]
    defeated: list[StrictStr]


class GameRecord(BaseModel):
    """``/game/record`` (v2): the whole game once it is over, fleets included:
    the game's id, the play order, every fleet, every salvo, the winner and
    how it ended."""

    model_config = _OUT
    game: StrictStr
    players: list[StrictStr]
    fleets: dict[StrictStr, dict[StrictStr, RecordShip]]
    salvos: list[RecordSalvo]
    winner: StrictStr | None
    termination: Literal["victory", "forfeit", "draw"]
