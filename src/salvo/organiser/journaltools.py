"""The referee's journal after the night: one game out of it and back through
the engine (``salvo journal export`` and ``replay``), and what every game came
to (``salvo journal list``, and the tournament director in-process).

An export is JSON lines: the first describes the game (arena, game number,
its id, seed, settings), every other one is an accepted event with its time
(team keys as SHA-256 digests unless asked for: a replay only compares them).
A replay applies the events to a new engine exactly as a restarted referee
does (:func:`resolve`) and reports every event the engine no longer accepts.

A game's journal ends with the event that sent the arena back to the lobby
(the reset tick after a game over, an abandon, a closed lobby) when there was
one: it belongs to the game, but not to its result. :func:`play` stops the
result before it; a :class:`GameSummary` says what the game came to.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from salvo.arena.journal import Store
from salvo.arena.journalformat import config_from_json, config_to_json, event_from_json, event_to_json
from salvo.failures import Failure
from salvo.game.engine import Game
from salvo.game.events import Abandon, CloseLobby, Config, Event, Fire, Phase, Rejected, Result, Tick
from salvo.game.identity import KEYED_DRAW
from salvo.spec.payloads import TRUE
from salvo.spec.topics import Outbound, Topics


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


# -- a game's events through the engine ---------------------------------------------------


@dataclass
class Played:
    """A game's events applied to an engine: :attr:`game` is the game as its
    result stands, before the event that sent it back to the lobby."""

    game: Game
    #: the reset tick, Abandon or CloseLobby that opened the next game, if journaled
    ended_by: Event | None = None
    #: when the game went over (the salvo or the tick that decided it)
    over_at: float | None = None
    #: (index, why) of every event the engine refused
    rejected: list[tuple[int, str]] = field(default_factory=list)


def play(game: Game, events: Sequence[Event]) -> Played:
    """Apply ``events`` (one game's, in journal order) to ``game`` as a
    resuming referee does. Every event is applied and checked, the one that
    resets the game too; the result is the game just before that one."""
    played = Played(game)
    for i, journaled in enumerate(events):
        event = resolve(game, journaled)
        before = None
        if played.ended_by is None and (
            type(event) in (Abandon, CloseLobby) or (type(event) is Tick and game.phase is Phase.OVER)
        ):
            before = copy.deepcopy(game)  # at most a few times a game: only these can reset it
        phase = game.phase
        result = game.handle(event)
        if isinstance(result, Rejected):
            played.rejected.append((i, result.error.reason))
        elif before is not None and game.game_no != before.game_no:
            played.game, played.ended_by = before, event
        elif played.ended_by is None and phase is not Phase.OVER and game.phase is Phase.OVER:
            played.over_at = event.now
    return played


# -- what a game came to ------------------------------------------------------------------


@dataclass(frozen=True)
class GameSummary:
    """What one game of the journal came to, as the engine published it.

    ``termination`` is the engine's own (``/game/stats/summary``: victory,
    forfeit, draw) for a game that went over; "abandoned" (``salvo referee
    --fresh``) or "lobby closed" (the organiser sent the lobby away) for one
    that ended without a result; "in progress" or "lobby" for one that has
    not ended. ``over``: it ended, one way or another, at ``ended``.
    ``duration_s`` runs from the game's first event to its end (to its last
    event while it goes on). ``stats``: each player's ``/game/stats/players/
    <name>`` as published; while a game goes on, the same fields so far (no
    place yet)."""

    arena: str
    game_no: int
    game_id: str
    #: play order once the game started; the lobby's join order before
    players: tuple[str, ...]
    started: float | None
    ended: float | None
    duration_s: float | None
    turns: int
    winner: str | None
    termination: str
    over: bool
    stats: dict[str, dict[str, Any]]
    events: int
    #: journaled events the engine no longer accepts (0 unless the journal and the rules disagree)
    rejected: int

    def as_json(self) -> dict[str, Any]:
        """The summary as JSON values (``json.dumps`` takes it)."""
        out = asdict(self)
        out["players"] = list(self.players)
        return out


def summary_of(arena: str, game_no: int, played: Played, events: Sequence[Event]) -> GameSummary:
    """The summary of a game played from its ``events``."""
    g, t = played.game, played.game.topics
    ended_by = played.ended_by
    if g.phase is Phase.OVER:
        termination = str(json.loads(g.retained[t.stats_summary])["termination"])
        ended = played.over_at
    elif ended_by is not None:
        termination = "abandoned" if type(ended_by) is Abandon else "lobby closed"
        ended = ended_by.now
    else:
        termination = "in progress" if g.phase is Phase.TURN else "lobby"
        ended = None
    stats: dict[str, dict[str, Any]] = {}
    for p in g.participants():
        published = g.retained.get(t.stats_player(p.name))
        if published is not None:
            stats[p.name] = json.loads(published)
        else:
            stats[p.name] = {
                "place": None,
                "shots": p.shots,
                "hits": p.hits,
                "accuracy": round(p.hits / p.shots, 4) if p.shots else 0.0,
                "ships_sunk": p.ships_sunk,
                "ships_lost": len(p.sunk),
                "defeated_in_turn": p.defeated_in_turn,
                "reason": p.reason,
            }
    started = events[0].now if events else None
    last = ended if ended is not None else (events[-1].now if events else None)
    return GameSummary(
        arena=arena,
        game_no=game_no,
        game_id=g.game_id,
        players=tuple(g.order or g.players),
        started=started,
        ended=ended,
        duration_s=None if started is None or last is None else round(last - started, 3),
        turns=g.turn,
        winner=g.winner,
        termination=termination,
        over=ended is not None,
        stats=stats,
        events=len(events),
        rejected=len(played.rejected),
    )


def _fresh(arena: str, known: tuple[str, Config, bytes], config: Config, game_no: int) -> Game:
    """A new engine at game ``game_no`` of ``arena``, as a resuming referee makes it."""
    seed, _created_with, id_key = known
    return Game(config, Topics(arena), seed, game_no=game_no, id_key=id_key)


def _summarize(
    store: Store, arena: str, known: tuple[str, Config, bytes], config: Config, game_no: int
) -> tuple[GameSummary, Config]:
    """Game ``game_no``'s summary, and the settings the next game starts with."""
    events = store.events(arena, game_no)
    game = _fresh(arena, known, config, game_no)
    played = play(game, events)
    return summary_of(arena, game_no, played, events), game.config


def summarize(store: Store, arena: str, game_no: int) -> GameSummary:
    """What game ``game_no`` of ``arena`` came to. ``store`` may be the
    referee's own (a writer) or one opened with ``writer=False``."""
    known = store.arena(arena)
    if known is None:
        raise JournalError(f"no arena {arena or '(default)'} in {store.path}")
    numbers = [n for n, _events in store.games(arena)]
    if game_no not in numbers:
        raise JournalError(f"no game {game_no} of arena {arena or '(default)'}; games: {numbers}")
    config = store.config_before(arena, game_no) or known[1]
    return _summarize(store, arena, known, config, game_no)[0]


def games(store: Store, arena: str) -> list[GameSummary]:
    """Every game of ``arena`` in the journal, in order (none for an unknown arena)."""
    known = store.arena(arena)
    numbers = [n for n, _events in store.games(arena)]
    if known is None or not numbers:
        return []
    # Each game starts with the settings the one before it ended with.
    config = store.config_before(arena, numbers[0]) or known[1]
    out = []
    for number in numbers:
        summary, config = _summarize(store, arena, known, config, number)
        out.append(summary)
    return out


def find_game(store: Store, game_id: str, arena: str | None = None) -> tuple[str, int] | None:
    """The (arena, game number) of the journaled game with id ``game_id``;
    only in ``arena`` when given, newest game first: the director asks at
    every result, on the referee's loop, and a walk of the whole night's
    journal would grow with the night."""
    for name in store.arenas() if arena is None else [arena]:
        known = store.arena(name)
        if known is None:
            continue
        for number, _events in reversed(store.games(name)):
            if _fresh(name, known, known[1], number).game_id == game_id:
                return name, number
    return None


def heard_so_far(store: Store, arenas: Iterable[str]) -> list[tuple[str, str]]:
    """The salvos and sinks of each arena's current game so far (topic,
    payload), in the order the referee published them: its journaled
    events played through the engine again give the very bytes. What a
    spectator that watched the whole game heard of it; the broker retains
    the last salvo only. A game back in its lobby has heard none; an arena
    the journal does not know is skipped."""
    heard: list[tuple[str, str]] = []
    for arena in arenas:
        known = store.arena(arena)
        if known is None:
            continue
        game_no, events = store.current_game(arena)
        game = _fresh(arena, known, store.config_before(arena, game_no) or known[1], game_no)
        t = game.topics
        mine: list[tuple[str, str]] = []
        for event in events:
            result = apply(game, event)
            if isinstance(result, Rejected):
                continue
            for p in result.effects:
                route = t.parse_outbound(p.topic)
                kind = route.kind if route is not None else None
                if kind is Outbound.STATE and p.payload == Phase.LOBBY.value:
                    mine.clear()  # the journal's last game ended: the next one has heard nothing yet
                elif kind is Outbound.SALVO or (kind is Outbound.SUNK and p.payload == TRUE):
                    mine.append((p.topic, p.payload))
        heard += mine
    return heard


# -- export -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    arena: str
    game_no: int
    events: int
    #: the game record, not the events
    record: bool = False

    def line(self) -> str:
        what = "the record of game" if self.record else "game"
        return f"exported {what} {self.game_no} of arena {self.arena or '(default)'}: {self.events} events"


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
            raise JournalError(_no_games(store, arena, state))
        number = game_no if game_no is not None else max(games)
        if number not in games:
            raise JournalError(f"no game {number}; games: {sorted(games)}")
        config = store.config_before(arena, number) or known[1]
        # The game's id and draw, not the arena's key: the key would tell
        # every later game's (its id, its first player).
        fresh = _fresh(arena, known, config, number)
        header = {
            "type": "game",
            "arena": arena,
            "game": number,
            "game_id": fresh.game_id,
            "seed": known[0],
            "config": json.loads(config_to_json(config)),
        }
        if known[0] == KEYED_DRAW:
            header["draw"] = fresh.draw()
        out.write(json.dumps(header) + "\n")
        events = store.events(arena, number)
        for ev in events:
            out.write(json.dumps(event_to_json(ev, redact_keys=not with_keys)) + "\n")
    finally:
        store.close()
    return Exported(arena, number, len(events))


def _no_games(store: Store, arena: str, state: Path) -> str:
    """The refusal for an arena without games, naming those the journal has."""
    known = ", ".join(a or "(default)" for a in store.arenas()) or "none"
    return f"no games of arena {arena or '(default)'} in {state} (its arenas: {known}; choose one with --arena)"


def export_record(state: Path, out: TextIO, arena: str = "", game_no: int | None = None) -> Exported:
    """Write the game record (``/game/record``, v2) of game ``game_no``
    (default: the latest) of ``arena`` to ``out``: the journal's events
    played through the engine again, so the very bytes the referee published
    for it (also when it was too large to publish). A game that is not over
    has no record. A referee may be running on ``state``: it is only read."""
    store = Store(state, writer=False)
    try:
        numbers = [n for n, _events in store.games(arena)]
        if store.arena(arena) is None or not numbers:
            raise JournalError(_no_games(store, arena, state))
        number = game_no if game_no is not None else max(numbers)
        if number not in numbers:
            raise JournalError(f"no game {number}; games: {numbers}")
        known = store.arena(arena)
        assert known is not None
        config = store.config_before(arena, number) or known[1]
        events = store.events(arena, number)
        record = play(_fresh(arena, known, config, number), events).game.record
    finally:
        store.close()
    if record is None:
        raise JournalError(f"game {number} of arena {arena or '(default)'} has no record: it never went over")
    out.write(record)
    return Exported(arena, number, len(events), record=True)


# -- replay -------------------------------------------------------------------------------


@dataclass
class Replayed:
    arena: str
    game_no: int
    #: the game as its result stands (before the event that reset it, if exported)
    game: Game
    summary: GameSummary
    events: int = 0
    #: each event the engine refused (as exported), with why
    rejected: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def line(self) -> str:
        g = self.game
        return (
            f"game {self.game_no} of arena {self.arena or '(default)'}: {self.events} events, "
            f"{len(self.rejected)} rejected; state {g.phase.value}, {g.turn} turns, winner {g.winner or '-'}"
            f" ({self.summary.termination})"
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
        draw=head.get("draw"),
    )
    events = [event_from_json(record) for record in records[1:]]
    played = play(game, events)
    return Replayed(
        head["arena"],
        head["game"],
        played.game,
        summary_of(head["arena"], head["game"], played, events),
        events=len(events),
        rejected=[(records[1 + i], reason) for i, reason in played.rejected],
    )
