"""Every payload salvo spells, and the :class:`Publish` effect that carries one.

The referee's payloads (one function per topic family) are what
:mod:`salvo.spec.wire`'s outbound models describe; ``tests/test_wire.py`` builds
each one and validates it against its model. What a team sends (a
placement, a join, the data of a shot) is spelled here too, once, for the
SDK, the bench, the fault harness and the tests. Error reports are
:func:`salvo.spec.codec.error_report`'s, beside the limit on the topic they echo.
No IO and no pydantic: the engine builds its output with this module.

This is also where the engine's speed tricks live. A two-player game
publishes some 350 messages, most of them a shot's hit or a turn's
announcement, so those are built by hand: f-strings (a third of the cost of
``dumps`` of a dict, half that of %-formatting) around pieces made once, the
numbers in them included (callgrind: a hit's payload 1,100 instructions
instead of 2,400).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple

from salvo.spec.codec import dumps
from salvo.spec.rules import BOARD_SIZE, FLEET, Placement

#: (v2.1) The protocol version the referee speaks, retained on ``/game/version``.
PROTOCOL_VERSION: Final = "2.1"
TRUE: Final = "true"
FALSE: Final = "false"


class Publish(NamedTuple):
    """One message out: the engine's and the protocol layer's only effect on the broker."""

    topic: str
    payload: str
    retain: bool
    #: May be dropped by the adapter's rate cap (error reports under a
    #: flood); game state never is.
    expendable: bool = False


#: ``_new(Publish, (topic, payload, retain, expendable))`` is ``Publish(...)``
#: without the Python-level ``__new__`` a NamedTuple adds: 1,900 instructions
#: against 3,500 (Python 3.11, callgrind), for each of those 350 messages.
_new: Final = tuple.__new__


class Retained(dict[str, str]):
    """What a game holds retained on the broker (state kept for late
    subscribers), topic -> payload, as the engine knows it: published again
    after a reconnect. :meth:`put` is the one way to change it, and it
    publishes each change, so the two never differ."""

    __slots__ = ()

    def put(self, out: list[Publish], topic: str, payload: str) -> None:
        """Publish ``payload`` retained on ``topic`` (by ``out``) and hold it; "" clears both."""
        if payload:
            self[topic] = payload
        else:
            self.pop(topic, None)
        out.append(_new(Publish, (topic, payload, True, False)))


def message(topic: str, payload: str, *, expendable: bool = False) -> Publish:
    """A message that is news once: a hit, an error report, a salvo's hits."""
    return _new(Publish, (topic, payload, False, expendable))


# -- the referee's payloads (salvo.spec.wire's outbound models) ------------------------------

#: Numbers as text, made once: turning a turn number into text was a third of
#: what a shot's hit cost. Turns, counts and players stay far below 1000.
_NUMBERS: Final = tuple(str(n) for n in range(1000))
_SMALL: Final = len(_NUMBERS)
#: The ends of the turn payloads, by a salvo's shots (and hits): a salvo has at
#: most one shot per ship, so these are complete (a larger index is a bug).
_TURN_TAILS: Final = tuple(f',"shots":{n}}}' for n in range(len(FLEET) + 1))
_SALVO_TAILS: Final = tuple(
    tuple(f',"shots":{n},"hits":{h}}}' for h in range(len(FLEET) + 1)) for n in range(len(FLEET) + 1)
)
_HIT_TAILS: Final = tuple(f',"shot":{n},"game":' for n in range(len(FLEET) + 1))
#: The start of every cell's ``hit`` payload.
_HIT_HEADS: Final = tuple(
    f'{{"x":{c % BOARD_SIZE},"y":{c // BOARD_SIZE},"turn":' for c in range(BOARD_SIZE * BOARD_SIZE)
)


def count(n: int) -> str:
    """``/game/hits`` and ``/players/count``: a bare number."""
    return _NUMBERS[n] if 0 <= n < _SMALL else str(n)


def quote(name: str) -> str:
    """A name as a JSON string: worked out once per player, used on every turn."""
    return dumps(name)


def names(players: list[str]) -> str:
    """``/players/list``."""
    return dumps(players)


def deadline(phase: str, at: float) -> str:
    """``/game/deadline`` (:class:`~salvo.spec.wire.Deadline`): unix seconds, three decimals."""
    return f'{{"phase":"{phase}","at":{at:.3f}}}'


def paused_deadline(phase: str, at: float, left: float) -> str:
    """``/game/deadline`` while the organiser holds the clock: ``at`` as it
    stood when the clock stopped, ``paused`` and the seconds ``left``."""
    return f'{{"phase":"{phase}","at":{at:.3f},"paused":true,"left":{left:.3f}}}'


def turn(number: int, player_json: str, shots: int) -> str:
    """``/game/turn`` (:class:`~salvo.spec.wire.TurnInfo`); the player as a JSON string (:func:`quote`)."""
    n = _NUMBERS[number] if number < _SMALL else number
    return f'{{"turn":{n},"player":{player_json}{_TURN_TAILS[shots]}'


def salvo(number: int, player_json: str, shots: int, hits: int) -> str:
    """``/game/salvo`` (:class:`~salvo.spec.wire.SalvoResult`): a salvo's result."""
    n = _NUMBERS[number] if number < _SMALL else number
    return f'{{"turn":{n},"player":{player_json}{_SALVO_TAILS[shots][hits]}'


def hit_end(game: str) -> str:
    """The end of every ``hit`` payload of game ``game`` (v2.1: hits carry
    the game), made once per game."""
    return f"{dumps(game)}}}"


def hit(topic: str, cell: int, turn: int, shot: int, end: str) -> Publish:
    """A shot at ``cell`` on the target's ``/players/<n>/hit`` (:class:`~salvo.spec.wire.Hit`):
    the whole Publish in one call, as one is made for every shot. ``shot``
    counts from 1 in its salvo; ``end`` is the game's :func:`hit_end`."""
    n = _NUMBERS[turn] if turn < _SMALL else turn
    return _new(Publish, (topic, f"{_HIT_HEADS[cell]}{n}{_HIT_TAILS[shot]}{end}", False, False))


def stats_summary(winner: str | None, turns: int, shots: int, hits: int, duration_s: float, termination: str) -> str:
    """``/game/stats/summary`` (:class:`~salvo.spec.wire.StatsSummary`)."""
    return dumps(
        {
            "winner": winner,
            "turns": turns,
            "shots": shots,
            "hits": hits,
            "duration_s": round(duration_s, 3),
            "termination": termination,
        }
    )


def player_stats(
    place: int,
    shots: int,
    hits: int,
    ships_sunk: int,
    ships_lost: int,
    defeated_in_turn: int | None,
    reason: str | None,
) -> str:
    """``/game/stats/players/<name>`` (:class:`~salvo.spec.wire.PlayerStats`)."""
    return dumps(
        {
            "place": place,
            "shots": shots,
            "hits": hits,
            "accuracy": round(hits / shots, 4) if shots else 0.0,
            "ships_sunk": ships_sunk,
            "ships_lost": ships_lost,
            "defeated_in_turn": defeated_in_turn,
            "reason": reason,
        }
    )


def record(
    game: str,
    players: Sequence[str],
    fleets: Mapping[str, Mapping[str, Placement]],
    salvos: Iterable[tuple[int, str, Sequence[tuple[str, int, bool]], int, Sequence[tuple[str, str]], Sequence[str]]],
    winner: str | None,
    termination: str,
) -> str:
    """``/game/record`` (:class:`~salvo.spec.wire.GameRecord`, v2): the whole game
    once it is over. ``fleets`` each in fleet order; ``salvos`` as
    (turn, player, shots as (target, cell, hit), hits, sunk as (owner, ship),
    defeated), the form :class:`salvo.game.events.SalvoEntry` keeps."""
    return dumps(
        {
            "game": game,
            "players": list(players),
            "fleets": {
                name: {
                    ship: {"x": p.x, "y": p.y, "orientation": p.orientation.value}
                    for ship in FLEET
                    if (p := fleets[name].get(ship)) is not None
                }
                for name in players
            },
            "salvos": [
                {
                    "turn": turn,
                    "player": player,
                    "shots": [
                        {"target": target, "x": c % BOARD_SIZE, "y": c // BOARD_SIZE, "hit": hit}
                        for target, c, hit in shots
                    ],
                    "hits": hits,
                    "sunk": [{"owner": owner, "ship": ship} for owner, ship in sunk],
                    "defeated": list(defeated),
                }
                for turn, player, shots, hits, sunk, defeated in salvos
            ],
            "winner": winner,
            "termination": termination,
        }
    )


# -- what a team sends (salvo.spec.wire's inbound models) ------------------------------------


def placement(p: Placement) -> str:
    """The plaintext of a sealed placement (:class:`~salvo.spec.wire.PlacementMessage`)
    in its canonical spelling: ``{"coordinates": "x;y", "orientation": ...}``."""
    return dumps({"coordinates": f"{p.x};{p.y}", "orientation": p.orientation.value})


def join_request(name: str, secret: str, request_id: str | None = None, game: str | None = None) -> str:
    """A participation request (:class:`~salvo.spec.wire.JoinRequest`), before
    any sealing; (v2.1) ``game``: the ``/game/id`` the joiner saw."""
    body = {"name": name, "secret": secret}
    if request_id is not None:
        body["request_id"] = request_id
    if game is not None:
        body["game"] = game
    return dumps(body)


def fire_data(x: int, y: int, target: str, turn: int, game: str) -> dict[str, object]:
    """The data a v2 shot signs (:class:`~salvo.spec.wire.FireData`): bound to its
    target, turn and game. A dict: :func:`salvo.spec.crypto.sign` canonicalises it."""
    return {"x": x, "y": y, "target": target, "turn": turn, "game": game}
