"""One game out of the referee's journal, and back through the engine: what
``salvo journal export`` writes and ``salvo journal replay`` checks.

An export is JSON lines: the first describes the game (arena, game number,
its id, seed, settings), every other one is an accepted event with its time
(team keys as SHA-256 digests unless asked for: a replay only compares them).
A replay applies the events to a new engine exactly as a restarted referee
does (:func:`resolve`) and reports every event the engine no longer accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from salvo.engine import Event, Fire, Game, Rejected, Result
from salvo.failures import Failure
from salvo.store import Store, config_from_json, config_to_json, event_from_json, event_to_json
from salvo.topics import Topics


class JournalError(Failure):
    """No such game in the state file, or not an exported game."""


def resolve(game: Game, event: Event) -> Event:
    """``event`` as the engine takes it now: a v1 journal's shots named no
    shooter (it was the current player)."""
    if type(event) is Fire and not event.shooter:
        return event._replace(shooter=game.current or "")
    return event


def apply(game: Game, event: Event) -> Result:
    """Apply one journaled event, the way a referee resuming from it does."""
    return game.handle(resolve(game, event))


# -- export -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    arena: str
    game_no: int
    events: int

    def line(self) -> str:
        return f"exported game {self.game_no} of arena {self.arena or '(default)'}: {self.events} events"


def export_game(
    state: Path, out: TextIO, arena: str = "", game_no: int | None = None, *, with_keys: bool = False
) -> Exported:
    """Write game ``game_no`` (default: the latest) of ``arena`` to ``out``.
    A referee may be running on ``state``: it is only read."""
    store = Store(state, writer=False)
    try:
        known = store.arena(arena)
        games = dict(store.games(arena))
        if known is None or not games:
            raise JournalError(f"no games of arena {arena or '(default)'} in {state}")
        number = game_no if game_no is not None else max(games)
        if number not in games:
            raise JournalError(f"no game {number}; games: {sorted(games)}")
        config = store.config_before(arena, number) or known[1]
        # The game's id, not the arena's key: the key would tell every later game's.
        game_id = Game(config, Topics(arena), known[0], game_no=number, id_key=known[2]).game_id
        header = {
            "type": "game",
            "arena": arena,
            "game": number,
            "game_id": game_id,
            "seed": known[0],
            "config": json.loads(config_to_json(config)),
        }
        out.write(json.dumps(header) + "\n")
        events = store.events(arena, number)
        for ev in events:
            out.write(json.dumps(event_to_json(ev, redact_keys=not with_keys)) + "\n")
    finally:
        store.close()
    return Exported(arena, number, len(events))


# -- replay -------------------------------------------------------------------------------


@dataclass
class Replayed:
    arena: str
    game_no: int
    game: Game
    events: int = 0
    #: each event the engine refused (as exported), with why
    rejected: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def line(self) -> str:
        g = self.game
        return (
            f"game {self.game_no} of arena {self.arena or '(default)'}: {self.events} events, "
            f"{len(self.rejected)} rejected; state {g.phase.value}, {g.turn} turns, winner {g.winner or '-'}"
        )

    def stats(self) -> list[tuple[str, str]]:
        """The stats topics the game ended with: (topic, payload)."""
        g, t = self.game, self.game.topics
        topics = (t.stats_summary, *(t.stats_player(n) for n in g.order))
        return [(topic, g.retained[topic]) for topic in topics if topic in g.retained]


def replay(lines: Iterable[str]) -> Replayed:
    """Play an exported game (its JSON lines) through the engine."""
    records = [json.loads(line) for line in lines if line.strip()]
    if not records or records[0].get("type") != "game":
        raise JournalError("not an exported game: the first line must be its description")
    head = records[0]
    game = Game(
        config_from_json(json.dumps(head["config"])),
        Topics(head["arena"]),
        head["seed"],
        game_no=head["game"],
        game_id=head.get("game_id"),
    )
    replayed = Replayed(head["arena"], head["game"], game, events=len(records) - 1)
    for record in records[1:]:
        result = apply(game, event_from_json(record))
        if isinstance(result, Rejected):
            replayed.rejected.append((record, result.error.reason))
    return replayed
