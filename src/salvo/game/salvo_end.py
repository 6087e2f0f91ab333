"""What a game comes to, worked out for :mod:`salvo.game.engine`: what a salvo
sank and whom it defeated as it ends, and at game over the winner, the stats
and the game record (spec sections 6-7). No IO, no clock, no pydantic; the
payloads are :mod:`salvo.spec.payloads`' to spell.

The record (``/game/record``, v2) is built from what the engine kept as the
game went (its play order, fleets and each :class:`~salvo.game.events.SalvoEntry`),
all of it derived from journaled events: a replay of the journal and a
restarted referee build the same bytes.
"""

from __future__ import annotations

from typing import Final

from salvo.game.events import PlayerState, SalvoEntry, places, termination
from salvo.spec import payloads
from salvo.spec.payloads import TRUE, Publish, Retained
from salvo.spec.rules import FLEET, SHIP_IDS
from salvo.spec.topics import Topics

#: The largest record the referee publishes: the shipped broker refuses
#: packets over 65,536 bytes (and disconnects their sender), topic and header
#: included. A longer game's record is kept, not published; ``salvo journal
#: export --record`` writes it all the same.
RECORD_CAP: Final = 60_000


def sinks_and_defeats(
    participants: list[PlayerState],
    shooter: PlayerState,
    turn: int,
    max_missed_turns: int,
    retained: Retained,
    topics: Topics,
    out: list[Publish],
) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """Announce the ships sunk in the salvo just ended, then the players it
    defeated, each in play order: who is still in, what sank (owner, ship),
    and who was defeated."""
    sunk_now: list[tuple[str, str]] = []
    for p in participants:
        sunk = p.sunk
        if len(sunk) == len(SHIP_IDS):
            continue
        for ship, damage in p.damage.items():  # SHIP_IDS order
            if len(damage) == FLEET[ship] and ship not in sunk:
                sunk.append(ship)
                sunk_now.append((p.name, ship))
                if p is not shooter:
                    shooter.ships_sunk += 1
                retained.put(out, topics.sunk(p.name, ship), TRUE)
    defeated: list[str] = []
    for p in participants:
        if p.defeated_in_turn is not None:
            continue
        if len(p.sunk) == len(SHIP_IDS):
            p.defeated_in_turn, p.reason = turn, "sunk"
        elif p is shooter and shooter.missed >= max_missed_turns:
            p.defeated_in_turn, p.reason = turn, "timeout"
        else:
            continue
        defeated.append(p.name)
        retained.put(out, topics.defeated(p.name), TRUE)
    return [p.name for p in participants if p.defeated_in_turn is None], sunk_now, defeated


def publish_results(
    game_id: str,
    participants: list[PlayerState],
    winner: str | None,
    turns: int,
    duration_s: float,
    salvos: list[SalvoEntry],
    retained: Retained,
    topics: Topics,
    out: list[Publish],
) -> str:
    """The results of a game that is over, in the order of spec section 7:
    ``/game/winner``, the stats summary, each participant's stats in play
    order, then ``/game/record`` (unless it is over :data:`RECORD_CAP`).
    The record's text, published or not."""
    t = topics
    shots, hits = sum(p.shots for p in participants), sum(p.hits for p in participants)
    how = termination(participants, winner, turns).value
    retained.put(out, t.winner, winner or "")
    retained.put(out, t.stats_summary, payloads.stats_summary(winner, turns, shots, hits, duration_s, how))
    for p, place in zip(participants, places(participants), strict=True):
        mine = payloads.player_stats(place, p.shots, p.hits, p.ships_sunk, len(p.sunk), p.defeated_in_turn, p.reason)
        retained.put(out, t.stats_player(p.name), mine)
    text = payloads.record(
        game_id, [p.name for p in participants], {p.name: p.fleet for p in participants}, salvos, winner, how
    )
    if len(text.encode()) <= RECORD_CAP:
        retained.put(out, t.record, text)
    return text
