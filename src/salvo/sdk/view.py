"""What one player knows, built from the messages that player may read.

:class:`View` is the player's knowledge; :class:`Observer` turns the
protocol's messages into updates of it. Both are pure (no IO): the MQTT
client SDK feeds the observer from the broker, the in-memory simulator feeds
it from the engine's publishes, so a strategy sees exactly the same thing in
both. Duplicate and re-delivered retained messages are harmless: every update
is idempotent.

:meth:`View.evidence` condenses my salvos into what they tell about one
opponent's board. A salvo only reports its total number of hits, so a cell is
a certain miss (salvo with 0 hits), a certain hit (all shots hit), or a
"maybe" with a probability; sinks announced after my salvos pin ships down.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from salvo.spec import wire
from salvo.spec.errors import Code
from salvo.spec.rules import BOARD_SIZE, FLEET, SHIP_IDS, Orientation, Placement, cell
from salvo.spec.topics import Outbound, Published, Topics

Shot = tuple[str, int, int]  # (target, x, y)


@dataclass
class MySalvo:
    """A salvo I fired: the shots I sent and, once announced, the hit count
    and the ships that sank in it."""

    turn: int
    shots: list[Shot] = field(default_factory=list)
    hits: int | None = None
    accepted: int | None = None
    sunk: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Evidence:
    """What my salvos say about one opponent's board (cells as ints)."""

    shot: set[int] = field(default_factory=set)  # every cell I fired at
    misses: set[int] = field(default_factory=set)
    hits: set[int] = field(default_factory=set)  # certainly ship cells
    maybe: dict[int, float] = field(default_factory=dict)  # cell -> P(ship)
    resolved: set[int] = field(default_factory=set)  # cells of ships known sunk

    @property
    def open_hits(self) -> set[int]:
        """Certain hits not yet explained by a sunk ship."""
        return self.hits - self.resolved


@dataclass
class View:
    me: str
    state: str = ""
    players: list[str] = field(default_factory=list)
    fleet: dict[str, Placement] = field(default_factory=dict)
    approved: set[str] = field(default_factory=set)
    turn: int = 0
    current: str | None = None
    allowed: int = 0
    deadline: wire.Deadline | None = None
    incoming: list[tuple[int, int]] = field(default_factory=list)  # shots at me
    #: (game, turn, shot) of every hit notification taken, so a duplicate is
    #: dropped: (turn, shot) alone is per game (v2.1 hits carry the game)
    incoming_seen: set[tuple[str | None, int, int]] = field(default_factory=set)
    salvos: dict[int, MySalvo] = field(default_factory=dict)  # my salvos by turn
    last_salvo: wire.SalvoResult | None = None
    sunk: dict[str, list[str]] = field(default_factory=dict)  # owner -> ship ids
    defeated: set[str] = field(default_factory=set)
    winner: str | None = None
    summary: wire.StatsSummary | None = None
    stats: dict[str, wire.PlayerStats] = field(default_factory=dict)
    errors: list[wire.ErrorReport] = field(default_factory=list)
    pubkey: str | None = None
    #: /game/id: the id every fire message of this game must sign
    game_id: str | None = None
    #: /game/server says "up"
    referee_up: bool = False
    game: int = 0  # counts resets seen, so waiters can tell games apart
    #: the games (as counted by ``game``) the organisers aborted with this
    #: team in them (game_aborted): kept across resets, the reset comes right after
    aborted: list[int] = field(default_factory=list)

    # -- queries -------------------------------------------------------------

    def opponents(self) -> list[str]:
        """Players I may usefully shoot at: in the game, not me, not defeated."""
        return [p for p in self.players if p != self.me and p not in self.defeated]

    def remaining_ships(self, owner: str) -> list[str]:
        gone = self.sunk.get(owner, [])
        return [s for s in SHIP_IDS if s not in gone]

    def my_turn(self) -> bool:
        return self.state == "turn" and self.current == self.me

    def record_salvo(self, shots: list[Shot]) -> MySalvo:
        """Remember the shots I am about to fire this turn."""
        salvo = self.salvos[self.turn] = MySalvo(self.turn, list(shots))
        return salvo

    def evidence(self, target: str) -> Evidence:
        ev = Evidence()
        for s in self.salvos.values():
            ev.shot.update(cell(x, y) for t, x, y in s.shots if t == target)
        salvos = [s for s in self.salvos.values() if s.hits is not None]
        # Resolve each salvo's hit count against cells known from the others,
        # until nothing changes (a few passes at most).
        for _ in range(4):
            changed = False
            for s in salvos:
                changed |= _refine(ev, s, target)
            changed |= self._resolve_sinks(ev, target, salvos)
            if not changed:
                break
        for c in ev.hits | ev.misses:
            ev.maybe.pop(c, None)
        return ev

    def _resolve_sinks(self, ev: Evidence, target: str, salvos: list[MySalvo]) -> bool:
        """Ships of ``target`` that sank in my salvos: the cells that every
        placement of the ship fitting my hits shares are explained (and
        certain hits); with one fitting placement, that is all of it."""
        changed = False
        for s in salvos:
            for owner, ship in s.sunk:
                if owner != target:
                    continue
                mine = {cell(x, y) for t, x, y in s.shots if t == target}
                possible = ev.hits | set(ev.maybe)
                fits = [
                    cs
                    for cs in placements(FLEET[ship])
                    if mine.intersection(cs) and possible.issuperset(cs) and not ev.resolved.intersection(cs)
                ]
                common = frozenset.intersection(*fits) if fits else frozenset()
                if not ev.resolved.issuperset(common):
                    ev.resolved.update(common)
                    ev.hits.update(common)
                    changed = True
        return changed


def _refine(ev: Evidence, s: MySalvo, target: str) -> bool:
    """Apply one salvo's hit count to ``target``'s cells. Shots at other
    targets in the same salvo share the count, so they are accounted too."""
    assert s.hits is not None
    known_hits = unknown = 0
    mine: list[int] = []
    for t, x, y in s.shots:
        c = cell(x, y)
        if t == target and c in ev.hits:
            known_hits += 1
        elif t == target and c in ev.misses:
            pass
        else:
            unknown += 1
            if t == target:
                mine.append(c)
    left = s.hits - known_hits
    if not mine:
        return False
    if left <= 0:
        new = set(mine) - ev.misses
        ev.misses.update(mine)
        return bool(new)
    if left >= unknown:
        new = set(mine) - ev.hits
        ev.hits.update(mine)
        return bool(new)
    p = left / unknown
    for c in mine:
        ev.maybe[c] = max(ev.maybe.get(c, 0.0), p)
    return False


_PLACEMENTS: dict[int, list[frozenset[int]]] = {}


def placements(length: int) -> list[frozenset[int]]:
    """Every on-board placement of a ship of ``length``, as cell sets."""
    if length not in _PLACEMENTS:
        out = []
        for y, x in itertools.product(range(BOARD_SIZE), range(BOARD_SIZE)):
            for o in Orientation:
                p = Placement(x, y, o)
                if p.fits(length):
                    out.append(frozenset(p.cells(length)))
        _PLACEMENTS[length] = out
    return _PLACEMENTS[length]


# -- events: what a message changed, for clients that react rather than poll --


@dataclass(frozen=True, slots=True)
class StateChanged:
    state: str


@dataclass(frozen=True, slots=True)
class PlayersChanged:
    players: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TurnStarted:
    turn: int
    player: str
    shots: int


@dataclass(frozen=True, slots=True)
class ShotAtMe:
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class SalvoEnded:
    result: wire.SalvoResult


@dataclass(frozen=True, slots=True)
class ShipSunk:
    owner: str
    ship: str


@dataclass(frozen=True, slots=True)
class PlayerDefeated:
    name: str


@dataclass(frozen=True, slots=True)
class ShipApproved:
    ship: str
    approved: bool


@dataclass(frozen=True, slots=True)
class ErrorReported:
    """A rejection: ``report.topic`` is the rejected message's topic.
    ``public`` when it came on ``/game/errors`` (anyone's; a join refusal is
    mine only when it echoes my ``request_id``), else on one of my own error
    topics (only the referee can write there)."""

    report: wire.ErrorReport
    public: bool = False

    @property
    def shot(self) -> Shot | None:
        """(v2.1) The ``(target, x, y)`` of the refused fire message this
        report names, when the referee could read it."""
        s = self.report.shot
        return None if s is None else (s.target, s.x, s.y)


@dataclass(frozen=True, slots=True)
class GameOver:
    winner: str | None


@dataclass(frozen=True, slots=True)
class RefereePresence:
    """``/game/server`` changed: the referee is ``up`` or ``down``."""

    up: bool


@dataclass(frozen=True, slots=True)
class StatsPublished:
    name: str | None  # None: the summary


GameEvent = (
    StateChanged
    | PlayersChanged
    | TurnStarted
    | ShotAtMe
    | SalvoEnded
    | ShipSunk
    | PlayerDefeated
    | ShipApproved
    | ErrorReported
    | GameOver
    | StatsPublished
    | RefereePresence
)


class Observer:
    """Feeds one player's :class:`View` from ``(topic, payload)`` messages and
    says what changed as a :data:`GameEvent`."""

    def __init__(self, view: View, topics: Topics) -> None:
        self.view = view
        self.t = topics
        # Game-wide topics: their text only. The player and ship topics take the route too.
        self._game: dict[Outbound, Callable[[str], GameEvent | None]] = {
            Outbound.STATE: self._state,
            Outbound.TURN: self._turn,
            Outbound.CURRENT: self._current,
            Outbound.SALVO: self._salvo,
            Outbound.PLAYERS_LIST: self._list,
            Outbound.WINNER: self._winner,
            Outbound.STATS_SUMMARY: self._summary,
            Outbound.DEADLINE: self._deadline,
            Outbound.PUBKEY: self._pubkey,
            Outbound.SERVER: self._server,
            Outbound.GAME_ID: self._game_id,
            Outbound.ERRORS: self._public_error,
        }
        self._player: dict[Outbound, Callable[[Published, str], GameEvent | None]] = {
            Outbound.STATS_PLAYER: self._stats,
            Outbound.HIT: self._hit,
            Outbound.PLAYER_ERROR: self._error,
            Outbound.DEFEATED: self._defeated,
            Outbound.SUNK: self._sunk,
            Outbound.APPROVED: self._approved,
            Outbound.SHIP_ERROR: self._ship_error,
        }
        self._replay = False

    def feed(self, topic: str, payload: bytes | str, retained: bool = False) -> GameEvent | None:
        """Apply one message. ``retained`` marks a replay of retained state
        (after a (re)subscribe): it is not news about the latest salvo."""
        route = self.t.parse_outbound(topic)
        if route is None:
            return None
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        self._replay = retained
        try:
            if (game_wide := self._game.get(route.kind)) is not None:
                return game_wide(text)
            if (per_player := self._player.get(route.kind)) is not None:
                return per_player(route, text)
        except ValueError:
            pass  # not ours to judge: a payload we cannot read changes nothing
        return None

    # -- handlers ------------------------------------------------------------

    def _state(self, text: str) -> GameEvent | None:
        v = self.view
        if not text or text == v.state:
            return None
        if text == "lobby" and v.state in ("over", "turn"):
            # The new game's id comes just before its lobby: keep it.
            fresh = View(
                v.me, pubkey=v.pubkey, game_id=v.game_id, referee_up=v.referee_up, game=v.game + 1, aborted=v.aborted
            )
            v.__dict__.update(fresh.__dict__)
        v.state = text
        return StateChanged(text)

    def _turn(self, text: str) -> GameEvent | None:
        if not text:
            return None
        info = wire.TurnInfo.model_validate_json(text)
        v = self.view
        if info.turn < v.turn:
            return None
        v.turn, v.current, v.allowed = info.turn, info.player, info.shots
        return TurnStarted(info.turn, info.player, info.shots)

    def _current(self, text: str) -> GameEvent | None:
        self.view.current = text or None
        return None

    def _salvo(self, text: str) -> GameEvent | None:
        if not text:
            return None
        result = wire.SalvoResult.model_validate_json(text)
        v = self.view
        v.last_salvo = result
        if result.player == v.me:
            mine = v.salvos.setdefault(result.turn, MySalvo(result.turn))
            mine.hits, mine.accepted = result.hits, result.shots
        return SalvoEnded(result)

    def _list(self, text: str) -> GameEvent | None:
        if not text:
            if self.view.state != "lobby" or not self.view.players:
                return None
            # Cleared while in the lobby: the organiser closed it (no game ran).
            self.view.players = []
            return PlayersChanged(())
        self.view.players = parse_names(text)
        return PlayersChanged(tuple(self.view.players))

    def _winner(self, text: str) -> GameEvent | None:
        self.view.winner = text or None
        return GameOver(self.view.winner)

    def _summary(self, text: str) -> GameEvent | None:
        if not text:
            return None
        self.view.summary = wire.StatsSummary.model_validate_json(text)
        return StatsPublished(None)

    def _deadline(self, text: str) -> GameEvent | None:
        self.view.deadline = wire.Deadline.model_validate_json(text) if text else None
        return None

    def _server(self, text: str) -> GameEvent | None:
        up = text == "up"
        if up == self.view.referee_up:
            return None
        self.view.referee_up = up
        return RefereePresence(up)

    def _pubkey(self, text: str) -> GameEvent | None:
        self.view.pubkey = text or None
        return None

    def _game_id(self, text: str) -> GameEvent | None:
        self.view.game_id = text or None
        return None

    def _hit(self, route: Published, text: str) -> GameEvent | None:
        if route.name != self.view.me:
            return None
        hit = wire.Hit.model_validate_json(text)
        v = self.view
        if hit.game is not None and v.game_id is not None and hit.game != v.game_id:
            return None  # another game's, delivered late
        seen = (hit.game, hit.turn, hit.shot)
        if seen in v.incoming_seen:
            return None  # delivered twice (the referee publishes at least once)
        v.incoming_seen.add(seen)
        v.incoming.append((hit.x, hit.y))
        return ShotAtMe(hit.x, hit.y)

    def _error(self, route: Published, text: str) -> GameEvent | None:
        if route.name != self.view.me:
            return None
        report = wire.ErrorReport.model_validate_json(text)
        self.view.errors.append(report)
        if report.code is Code.GAME_ABORTED:
            self.view.aborted = [*self.view.aborted[-9:], self.view.game]
        return ErrorReported(report)

    def _public_error(self, text: str) -> GameEvent | None:
        # Not kept in view.errors: anyone's rejections land here.
        return ErrorReported(wire.ErrorReport.model_validate_json(text), public=True)

    def _stats(self, route: Published, text: str) -> GameEvent | None:
        if not text:
            return None
        self.view.stats[route.name] = wire.PlayerStats.model_validate_json(text)
        return StatsPublished(route.name)

    def _defeated(self, route: Published, text: str) -> GameEvent | None:
        if text != "true":
            return None
        self.view.defeated.add(route.name)
        return PlayerDefeated(route.name)

    def _sunk(self, route: Published, text: str) -> GameEvent | None:
        v, owner, ship = self.view, route.name, route.ship
        if text != "true" or ship not in FLEET:
            return None
        gone = v.sunk.setdefault(owner, [])
        if ship in gone:
            return None
        gone.append(ship)
        # A live sink follows the salvo that caused it.
        last = v.last_salvo
        if not self._replay and last is not None and last.player == v.me and last.turn in v.salvos:
            v.salvos[last.turn].sunk.append((owner, ship))
        return ShipSunk(owner, ship)

    def _approved(self, route: Published, text: str) -> GameEvent | None:
        v = self.view
        if route.name != v.me or not text:
            return None
        (v.approved.add if text == "true" else v.approved.discard)(route.ship)
        return ShipApproved(route.ship, text == "true")

    def _ship_error(self, route: Published, text: str) -> GameEvent | None:
        if route.name != self.view.me or not text:
            return None
        report = wire.ErrorReport.model_validate_json(text)
        self.view.errors.append(report)
        if report.code is Code.GAME_ABORTED:
            self.view.aborted = [*self.view.aborted[-9:], self.view.game]
        return ErrorReported(report)


def parse_names(text: str) -> list[str]:
    """The JSON array of ``/players/list``."""
    value: Any = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ValueError("not a list of names")
    return list(value)


def refused(errors: Iterable[wire.ErrorReport], signed: Mapping[str, Shot]) -> list[tuple[Shot, Code]]:
    """(v2.1) Each refused shot once, with its code (a restart tells a refusal
    again): the report's own shot, else the one ``signed`` (by the first 16
    characters of its signature) with the signature the report echoes."""
    got = {
        r.signature or i: (ErrorReported(r).shot or signed.get(r.signature or ""), r.code) for i, r in enumerate(errors)
    }
    return [(shot, code) for shot, code in got.values() if shot is not None]
