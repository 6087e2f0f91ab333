"""Shared helpers for the tests: fixed fleets, an in-memory game driver, and
the protocol layer driven without a broker."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

from nacl.public import PrivateKey

from salvo.arena.arena import Admit, Arena, DeriveKey, Effect, Log, Record
from salvo.game.engine import Game
from salvo.game.events import Accepted, Config, Event, Fire, Join, Phase, Place, Rejected, Result, Tick
from salvo.spec import crypto, payloads
from salvo.spec.errors import Rejection
from salvo.spec.payloads import Publish
from salvo.spec.rules import FLEET, SHIP_IDS, Orientation, Placement
from salvo.spec.topics import Topics
from salvo.tools.conformance.harness import team_key

H, V = Orientation.HORIZONTAL, Orientation.VERTICAL

#: Ships on rows 0..4, left aligned: carrier (0..4,0), battleship (0..3,1), ...
ROWS: dict[str, Placement] = {s: Placement(0, i, H) for i, s in enumerate(SHIP_IDS)}
#: Ships in columns 5..9, top aligned.
COLUMNS: dict[str, Placement] = {s: Placement(5 + i, 0, V) for i, s in enumerate(SHIP_IDS)}


def ship_cells(fleet: dict[str, Placement], ship: str) -> list[tuple[int, int]]:
    return [(c % 10, c // 10) for c in fleet[ship].cells(FLEET[ship])]


def all_cells(fleet: dict[str, Placement]) -> list[tuple[int, int]]:
    return [xy for ship in SHIP_IDS for xy in ship_cells(fleet, ship)]


_nonces = itertools.count(1)


def nonce() -> bytes:
    return next(_nonces).to_bytes(24, "big")


class Driver:
    """Drives a :class:`Game` with a fake clock and records every publish."""

    def __init__(self, seed: int | str = 7, prefix: str = "", **config: Any) -> None:
        self.game = Game(Config(**config), Topics(prefix), seed=seed)
        self.now = 1_000.0
        self.published: list[Publish] = []
        self.fleets: dict[str, dict[str, Placement]] = {}

    @property
    def t(self) -> Topics:
        return self.game.topics

    def send(self, event: Event) -> Result:
        result = self.game.handle(event)
        if isinstance(result, Accepted):
            self.published += result.effects
        return result

    def ok(self, event: Event) -> list[Publish]:
        result = self.send(event)
        assert isinstance(result, Accepted), result
        return result.effects

    def rejected(self, event: Event, *fragments: str, code: str | None = None) -> str:
        """Send an event that must be rejected; the state must not change."""
        before = self.game.snapshot()
        result = self.game.handle(event)
        assert isinstance(result, Rejected), f"expected a rejection, got {result}"
        for fragment in fragments:
            assert fragment in result.error.reason, (fragment, result.error.reason)
        if code is not None:
            assert result.error.code == code, (code, result.error)
        assert self.game.snapshot() == before, "a rejected event changed the state"
        return result.error.reason

    def join(self, *names: str) -> None:
        for name in names:
            self.ok(Join(name, name.encode().ljust(32, b"k"), self.now))

    def place(self, name: str, fleet: dict[str, Placement]) -> list[Publish]:
        out: list[Publish] = []
        for ship, placement in fleet.items():
            out += self.ok(Place(name, ship, placement, self.now))
        self.fleets[name] = dict(fleet)
        return out

    def fire(self, target: str, x: int, y: int, turn: int | None = None) -> list[Publish]:
        """A shot of the current player (unbound unless ``turn`` is given)."""
        return self.ok(self.shot(target, x, y, turn))

    def shot(
        self,
        target: str,
        x: int,
        y: int,
        turn: int | None = None,
        *,
        shooter: str | None = None,
        game: str | None = None,
        nonce_: bytes | None = None,
    ) -> Fire:
        """A Fire event (the current player's unless ``shooter``)."""
        who = shooter if shooter is not None else (self.game.current or "")
        return Fire(who, target, x, y, turn, game, nonce_ if nonce_ is not None else nonce(), self.now)

    def tick(self, seconds: float) -> list[Publish]:
        self.now += seconds
        return self.ok(Tick(self.now))

    def start(self, fleets: dict[str, dict[str, Placement]]) -> None:
        self.join(*fleets)
        for name, fleet in fleets.items():
            self.place(name, fleet)

    def play_turn(self, shots: list[tuple[str, int, int]]) -> list[Publish]:
        out: list[Publish] = []
        for target, x, y in shots:
            out += self.fire(target, x, y)
        return out

    @property
    def cur(self) -> str:
        assert self.game.current is not None, "not in a turn"
        return self.game.current

    def misses(self, target: str, n: int) -> list[tuple[str, int, int]]:
        """``n`` shots at empty cells of ``target``."""
        taken = set(all_cells(self.fleets[target]))
        free = [(x, y) for y in range(10) for x in range(10) if (x, y) not in taken]
        return [(target, x, y) for x, y in free[:n]]

    def idle_turn(self) -> list[Publish]:
        """The current player fires its whole salvo at empty cells of its own board."""
        return self.play_turn(self.misses(self.cur, self.game.allowed))

    def attack(self, target: str, cells: list[tuple[int, int]]) -> list[Publish]:
        """One salvo of the current player at ``cells`` of ``target`` (consumed
        from the list), filled up with misses."""
        n = self.game.allowed
        batch = [(target, x, y) for x, y in cells[:n]]
        del cells[:n]
        return self.play_turn(batch + self.misses(target, n - len(batch)))

    def wear_down(self, target: str, cells: list[tuple[int, int]], shooter: str | None = None) -> None:
        """Play turns until ``cells`` of ``target`` are all hit; only ``shooter``
        (default: anyone but the target) attacks, everyone else idles."""
        while cells:
            if self.cur != target and shooter in (None, self.cur):
                self.attack(target, cells)
            else:
                self.idle_turn()


def phase_of(game: Game) -> Phase:
    """The game's phase now: read through a call, because mypy would keep a
    narrowed ``game.phase`` across the calls that change it."""
    return game.phase


def topics_of(effects: list[Publish]) -> list[str]:
    return [p.topic for p in effects]


# -- the protocol layer without a broker ------------------------------------------------


REFEREE_KEY = PrivateKey(bytes(range(32)))


class ArenaDriver:
    """Drives a :class:`protocol.Arena` like the MQTT adapter does, with no
    broker: raw ``(topic, payload)`` in; publishes, journal records and log
    lines collected. Key derivations run at once (the adapter runs them on a
    pool) unless ``defer_keys``, then :meth:`finish_keys` completes them."""

    def __init__(
        self, prefix: str = "", seed: int = 7, *, admit: Admit | None = None, game_id: str | None = None, **config: Any
    ) -> None:
        options = {k: config.pop(k) for k in ("sealed_joins_only", "unbound_fire") if k in config}
        self.game = Game(Config(**config), Topics(prefix), seed=seed, game_id=game_id)
        self.arena = Arena(self.game, REFEREE_KEY, admit=admit, **options)
        self.t = self.game.topics
        self.now = 1_000.0
        self.published: list[Publish] = []
        self.records: list[Event] = []
        self.logs: list[Log] = []
        self.defer_keys = False
        self.pending: list[DeriveKey] = []
        self.secrets: dict[str, str] = {}
        self.inbound: list[str] = []  # the topic of every message sent
        self.payloads: list[bytes] = []  # and its payload

    def run(self, effects: list[Effect]) -> list[Publish]:
        out: list[Publish] = []
        for effect in effects:
            if isinstance(effect, Publish):
                out.append(effect)
            elif isinstance(effect, Record):
                self.records.append(effect.event)
            elif isinstance(effect, Log):
                self.logs.append(effect)
            elif isinstance(effect, DeriveKey) and not any(effect is job for job in self.pending):
                self.pending.append(effect)  # (a repeat of a join comes with the job under way)
        self.published += out
        if not self.defer_keys:
            out += self.finish_keys()
        return out

    def finish_keys(self, wrong: Callable[[DeriveKey], Rejection | None] | None = None) -> list[Publish]:
        """Complete the derivations asked for (``wrong`` may refuse one)."""
        out: list[Publish] = []
        jobs, self.pending = self.pending, []
        for job in jobs:
            error = wrong(job) if wrong else None
            if error is not None:
                out += self.run(self.arena.on_key_failed(job, error, self.now))
            else:
                out += self.run(self.arena.on_key(job, team_key(job.name, job.secret), self.now))
        return out

    def send(self, topic: str, payload: str | bytes) -> list[Publish]:
        raw = payload.encode() if isinstance(payload, str) else payload
        self.inbound.append(topic)
        self.payloads.append(raw)
        return self.run(self.arena.on_message(topic, raw, self.now))

    def join(self, name: str, secret: str | None = None, request_id: str | None = None) -> list[Publish]:
        secret = secret or self.secrets.setdefault(name, f"{name}-secret")
        return self.send(self.t.request_participation, payloads.join_request(name, secret, request_id))

    def key(self, name: str) -> bytes:
        return team_key(name, self.secrets.get(name, f"{name}-secret"))

    def place(self, name: str, fleet: dict[str, Placement]) -> list[Publish]:
        out: list[Publish] = []
        for ship, p in fleet.items():
            out += self.send(self.t.place(name, ship), crypto.seal(self.key(name), payloads.placement(p)))
        return out

    def start(self, fleets: dict[str, dict[str, Placement]]) -> None:
        for name in fleets:
            self.join(name)
        for name, fleet in fleets.items():
            self.place(name, fleet)
        assert self.game.phase is Phase.TURN
        self.records.clear()  # from here on: what the game's messages did
        self.published.clear()

    def signed_fire(self, shooter: str, to: str, x: int, y: int, **data: Any) -> str:
        """A fire message signed by ``shooter``: bound to target ``to``, the
        current turn and game unless ``data`` says otherwise."""
        body = payloads.fire_data(x, y, to, self.game.turn, self.game.game_id) | data
        return json.dumps(crypto.sign(self.key(shooter), body))

    def fire(self, shooter: str, to: str, x: int, y: int, **data: Any) -> list[Publish]:
        return self.send(self.t.fire(to), self.signed_fire(shooter, to, x, y, **data))

    def errors(self, out: list[Publish]) -> dict[str, dict[str, Any]]:
        """The error reports among ``out``, by the topic they went to."""
        return {p.topic: json.loads(p.payload) for p in out if p.topic.endswith(("/error", "/errors"))}


def spent(game: Game) -> dict[tuple[str, bytes], str | bool]:
    """Every spent nonce of the game, by (player, nonce)."""
    return {(name, n): v for name, p in game.players.items() for n, v in p.nonces.items()}


def without_spent(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A game snapshot without what a rejected but authentic signature leaves
    behind: its spent nonce and the count of them."""
    players = {name: dataclasses.replace(p, burned=0, nonces={}) for name, p in snapshot["players"].items()}
    return {**snapshot, "players": players}


def game_over(t: Topics, winner: str, loser: str, game_id: str = "g1") -> dict[str, str]:
    """The retained topics of a two-player game ``winner`` won, in the order
    the referee publishes them (the stats, then the state): what a
    tournament director records a result from."""
    return {
        t.game_id: game_id,
        t.players_list: json.dumps([winner, loser]),
        t.stats_summary: payloads.stats_summary(winner, 9, 30, 17, 60.0, "victory"),
        t.stats_player(winner): payloads.player_stats(1, 15, 17, 5, 2, None, None),
        t.stats_player(loser): payloads.player_stats(2, 15, 0, 2, 5, 9, "sunk"),
        t.state: "over",
    }
