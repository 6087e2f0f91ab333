"""The game state machine: events in, effects out. No IO, no clock, no pydantic.

Rules this module enforces (spec sections 5-7):

* Phases go ``LOBBY -> TURN -> OVER -> LOBBY``:

  ============  =================================  ===============================
  phase         event                              result
  ============  =================================  ===============================
  LOBBY         Join (new name, room left)         player added, deadline re-armed
  LOBBY         Place (legal)                      ship approved; may start game
  LOBBY         Tick past deadline, >= 2 fleets    TURN, incomplete fleets left out
  LOBBY         Tick past deadline, < 2 fleets     deadline re-armed, still LOBBY
  LOBBY         Tick past deadline                 incomplete fleets removed first
  TURN          Fire (valid)                       shot; a full salvo ends the turn
  TURN          Tick past turn deadline            the salvo ends with what it has
  TURN          salvo ends, <= 1 player left       OVER
  OVER          Tick past reset deadline           LOBBY: a new game, a new id
  LOBBY         CloseLobby (the organiser)         players sent away, LOBBY empty
  any           Burn (an authentic, rejected       its nonce is spent for the game
                signature)
  any           anything else                      Rejected, state untouched
  ============  =================================  ===============================

* Every game has an id (``/game/id``), derived from the arena's secret id
  key and the game number: unpredictable without the key, the same on a
  replay. A fire signs it, with its target and turn (v2 binding).
* A signature's nonce is spent for the rest of the game once it opened under
  a player's key, shot or not; the nonces of a game are forgotten at its
  reset (its id binds every signature to it), so memory stays flat.

* At the placement deadline every joined player whose fleet is incomplete is
  removed (told ``left_out``), so names that never place cannot hold the
  lobby full.
* Play order is the order in which fleets became complete; the first player
  is drawn from a RNG seeded by ``(seed, game number)``, then play goes round
  the order skipping defeated players.
* A turn allows as many shots as the shooter has ships afloat when it starts.
  A shot hits when its cell holds a ship segment, hit before or not. Sinks and
  defeats are decided and announced only when the salvo ends, in the order
  hits -> salvo -> sunk -> defeated -> next turn / game over; until then a
  player whose last ship went down can still be targeted.
* A player who lets ``max_missed_turns`` turns in a row time out without a
  shot is dropped (defeated, reason ``timeout``).

Timers are state, not effects: :meth:`Game.next_deadline` says when the
engine next wants a :class:`Tick`, so a resumed engine needs no re-arming.
Every handler validates completely before it mutates anything, so a
:class:`Rejected` result leaves the game exactly as it was.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import hmac
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from salvo.codec import dumps, error_report
from salvo.errors import Code, Illegal, Rejection
from salvo.rules import BOARD_SIZE, FLEET, SHIP_IDS, Placement, placement_error
from salvo.topics import Topics

TRUE: Final = "true"
FALSE: Final = "false"
#: The start of every cell's ``hit`` payload, built once: one is sent per shot.
_HIT_HEADS: Final = tuple(
    f'{{"x":{c % BOARD_SIZE},"y":{c // BOARD_SIZE},"turn":' for c in range(BOARD_SIZE * BOARD_SIZE)
)
#: Spent nonces a player can leave in one game with rejected signatures.
#: Beyond this the referee stops remembering them (a flood of authentic but
#: rejected fire messages would otherwise grow memory and the journal): they
#: could only be replayed by someone who reads fire topics, which the shipped
#: ACL gives nobody but the referee (docs/security.md).
BURN_CAP: Final = 1000
#: Placements (moves included) a player may make in one game: five ships and
#: room to change one's mind, but not a flood of moves, each of which would
#: be journaled and remembered.
PLACEMENTS_CAP: Final = 100
#: The ``deadline`` payload, spelled out (every turn has one): unix seconds with
#: three decimals, formatted at a third of the cost of ``dumps``/``round``.
_DEADLINE: Final = '{"phase":"%s","at":%.3f}'
#: ``_new(Publish, (topic, payload, retain, expendable))`` makes the same tuple
#: as ``Publish(...)`` without the Python-level ``__new__`` frame a NamedTuple
#: adds: half the cost, and a game makes some 500 of them.
_new: Final = tuple.__new__


class Phase(enum.Enum):
    LOBBY = "lobby"
    TURN = "turn"
    OVER = "over"


class Termination(enum.Enum):
    """How a game ended, as published in ``/game/stats/summary``."""

    VICTORY = "victory"  # one player left, the others sunk
    FORFEIT = "forfeit"  # one player left, the last opponent dropped for missed turns
    DRAW = "draw"  # the last players went down in the same salvo


@dataclass(frozen=True, slots=True)
class Config:
    placement_timeout: float = 60.0
    turn_timeout: float = 30.0
    reset_after: float = 300.0
    min_players: int = 2
    max_players: int = 10
    max_missed_turns: int = 3

    def __post_init__(self) -> None:
        if min(self.placement_timeout, self.turn_timeout, self.reset_after) <= 0:
            raise ValueError("timeouts must be positive")
        if not 2 <= self.min_players <= self.max_players:
            raise ValueError("need 2 <= min_players <= max_players")
        if self.max_missed_turns < 1:
            raise ValueError("max_missed_turns must be at least 1")


# -- events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Join:
    name: str
    key: bytes = field(repr=False)
    now: float


@dataclass(frozen=True, slots=True)
class Place:
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
    protection (None without signatures). (A NamedTuple: one is made per
    shot, and that is the hot path.)"""

    shooter: str
    target: str
    x: int
    y: int
    turn: int | None
    game: str | None
    nonce: bytes | None
    now: float


@dataclass(frozen=True, slots=True)
class Burn:
    """A signature that opened under ``player``'s key but was rejected: its
    nonce is spent for the rest of the game all the same (v2)."""

    player: str
    nonce: bytes
    now: float
    #: why it was refused, for the journal's readers
    code: str = ""


@dataclass(frozen=True, slots=True)
class Extend:
    """Give the running deadline (turn or placement) ``seconds`` more: the
    time the referee was cut off from the broker, when nobody could act."""

    seconds: float
    now: float


@dataclass(frozen=True, slots=True)
class Tick:
    now: float


@dataclass(frozen=True, slots=True)
class Configure:
    """New settings from now on (a referee restarted with other flags).
    Journaled like every event, so a replay meets it at the same point."""

    config: Config
    now: float


@dataclass(frozen=True, slots=True)
class CloseLobby:
    """The organiser sends everybody in the lobby away (a tournament game
    whose opponent never came). Only in the lobby: a game that has started
    is played out."""

    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class Abandon:
    """The organiser starts a new game over the one the journal holds, in
    any phase (``salvo referee --fresh``: the broker shows another game, the
    teams never saw this one). Its retained topics are cleared; nobody is told."""

    reason: str
    now: float


Event = Join | Place | Fire | Tick | Configure | CloseLobby | Burn | Extend | Abandon


# -- effects and results ----------------------------------------------------------


class Publish(NamedTuple):
    # A NamedTuple, not a frozen dataclass: several are made per shot, and a
    # frozen dataclass's __init__ costs four times as much.
    topic: str
    payload: str
    retain: bool
    #: May be dropped by the adapter's rate cap (error reports under a
    #: flood); game state never is.
    expendable: bool = False


class Accepted(NamedTuple):
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


# -- state ------------------------------------------------------------------------


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


class Game:
    """One arena's game, across resets. Drive it with :meth:`handle`."""

    def __init__(
        self,
        config: Config,
        topics: Topics,
        seed: int | str,
        *,
        game_no: int = 1,
        id_key: bytes | None = None,
        game_id: str | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.seed = seed
        self.game_no = game_no
        #: The arena's secret for game ids: random and kept in the state file
        #: by the referee; derived from the seed here when none is given
        #: (predictable: for tests and simulations only).
        self.id_key = id_key if id_key is not None else hashlib.blake2b(str(seed).encode()).digest()[:32]
        #: game_no's id as given, not derived (a replay of an exported game,
        #: which carries its id but not the arena's key)
        self._given_id = (game_no, game_id) if game_id is not None else None
        #: What the engine currently holds retained on the broker, topic -> payload;
        #: republished after a reconnect, cleared at reset.
        self.retained: dict[str, str] = {topics.state: Phase.LOBBY.value}
        self._new_game()

    def _new_game(self) -> None:
        #: This game's id: 64 bits of a keyed BLAKE2b of its number.
        if self._given_id is not None and self._given_id[0] == self.game_no:
            self.game_id = self._given_id[1]
        else:
            self.game_id = hashlib.blake2b(str(self.game_no).encode(), key=self.id_key, digest_size=8).hexdigest()
        self.retained[self.topics.game_id] = self.game_id
        self.phase = Phase.LOBBY
        self.players: dict[str, PlayerState] = {}  # join order
        self.ready: list[str] = []  # fleet-completion order
        self.order: list[str] = []  # play order of the participants
        self.after: dict[str, str] = {}  # each participant -> the next in play order
        self.turn = 0
        self.current: str | None = None
        self.allowed = 0
        #: The salvo in progress: shots fired and hits so far, and whether a
        #: ship's last cell was hit (only then can the salvo's end sink one).
        self.fired = 0
        self.salvo_hits = 0
        self.sank = False
        self.deadline: float | None = None
        self.started_at: float | None = None
        self.winner: str | None = None

    # -- queries ----------------------------------------------------------------

    def next_deadline(self) -> float | None:
        return self.deadline

    def signers(self) -> Iterator[tuple[str, bytes]]:
        """Whose key may open a signature, likeliest first: the current
        player's, then every other player's of this game."""
        current = self.current
        if current is not None:
            yield current, self.players[current].key
        for name, player in self.players.items():
            if name != current:
                yield name, player.key

    def nonce_seen(self, player: str, nonce: bytes) -> str | bool | None:
        """Where ``player``'s signature was taken (a shot's target, a
        placement's "name/ship"); False when it was refused; None: new."""
        known = self.players.get(player)
        return known.nonces.get(nonce) if known is not None else None

    def participants(self) -> list[PlayerState]:
        return [self.players[n] for n in self.order]

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of all mutable state, comparable with ``==``."""
        skip = {"config", "topics"}
        return {k: copy.deepcopy(v) for k, v in vars(self).items() if k not in skip}

    # -- the one entry point --------------------------------------------------------

    def handle(self, event: Event) -> Result:
        try:
            if type(event) is Fire:  # the hot path: no list or note to set up here
                return self._fire(event)
            out: list[Publish] = []
            if isinstance(event, Tick):
                note = self._tick(event.now, out)
            elif isinstance(event, Place):
                note = self._place(event, out)
            elif isinstance(event, Join):
                note = self._join(event, out)
            elif isinstance(event, Burn):
                note = self._burn(event)
            elif isinstance(event, Extend):
                note = self._extend(event, out)
            elif isinstance(event, CloseLobby):
                note = self._close_lobby(event, out)
            elif isinstance(event, Abandon):
                old = self.game_no
                self._reset(out)
                note = f"game {old} abandoned ({event.reason}); game {self.game_no} opens"
            elif isinstance(event, Configure):
                self.config = event.config
                note = f"settings now {event.config}"
            else:
                raise TypeError(f"not an engine event: {event!r}")
        except Rejection as exc:
            return Rejected(exc)
        return _new(Accepted, (out, note, ()))

    # -- output helpers -------------------------------------------------------------

    def _pub(self, out: list[Publish], topic: str, payload: str, retain: bool = True) -> None:
        if retain:
            if payload:
                self.retained[topic] = payload
            else:
                self.retained.pop(topic, None)
        out.append(_new(Publish, (topic, payload, retain, False)))

    def _pub_deadline(self, out: list[Publish], phase: str, at: float) -> None:
        self.deadline = at
        self._pub(out, self.topics.deadline, _DEADLINE % (phase, at))

    def _pub_players(self, out: list[Publish], names: list[str]) -> None:
        self._pub(out, self.topics.players_list, dumps(names))
        self._pub(out, self.topics.players_count, str(len(names)))

    # -- lobby ----------------------------------------------------------------------

    def check_join(self, name: str) -> PlayerState | None:
        """The checks of a join that need no key; the protocol layer runs them
        before paying for a key derivation, the engine again when applying."""
        if self.phase is not Phase.LOBBY:
            raise Illegal(
                Code.GAME_IN_PROGRESS, f"game in progress (state {self.phase.value}); join when /game/state is lobby"
            )
        known = self.players.get(name)
        if known is None and len(self.players) >= self.config.max_players:
            raise Illegal(Code.LOBBY_FULL, f"lobby full: {self.config.max_players} players already joined")
        return known

    def _join(self, ev: Join, out: list[Publish]) -> str:
        known = self.check_join(ev.name)
        if known is not None:
            if not hmac.compare_digest(known.key, ev.key):
                raise Illegal(Code.NAME_TAKEN, f"name taken: {ev.name!r} already joined with another secret")
            return f"{ev.name} joined again (no-op)"
        self.players[ev.name] = PlayerState(ev.name, ev.key, quoted=dumps(ev.name), hit_topic=self.topics.hit(ev.name))
        self._pub_players(out, list(self.players))
        for ship in SHIP_IDS:
            self._pub(out, self.topics.approved(ev.name, ship), FALSE)
        self._pub_deadline(out, "placement", ev.now + self.config.placement_timeout)
        return f"{ev.name} joined ({len(self.players)} in lobby)"

    def _close_lobby(self, ev: CloseLobby, out: list[Publish]) -> str:
        if self.phase is not Phase.LOBBY:
            raise Illegal(Code.GAME_IN_PROGRESS, f"game in progress (state {self.phase.value}): it is played out")
        names = list(self.players)
        for name in names:
            report = error_report(self.topics.request_participation, f"lobby closed: {ev.reason}", Code.LOBBY_CLOSED)
            self._pub(out, self.topics.player_error(name), report, retain=False)
        self._reset(out)
        return f"lobby closed ({ev.reason}); sent away {names or 'nobody'}; game {self.game_no} opens"

    def check_place(self, name: str, ship: str) -> PlayerState:
        """The checks of a placement that need no plaintext: the protocol layer
        runs them before decrypting, the engine again before applying."""
        if self.phase is not Phase.LOBBY:
            raise Illegal(
                Code.NOT_IN_LOBBY,
                f"not in the lobby (state {self.phase.value}): ships are placed before the game starts",
            )
        player = self.players.get(name)
        if player is None:
            raise Illegal(Code.NOT_JOINED, f"not a joined player: {name!r} must join first")
        if ship not in FLEET:
            raise Illegal(Code.UNKNOWN_SHIP, f"unknown ship {ship!r}; ships are {', '.join(SHIP_IDS)}")
        return player

    def _place(self, ev: Place, out: list[Publish]) -> str:
        player = self.check_place(ev.name, ev.ship)
        if ev.nonce is not None and ev.nonce in player.nonces:
            raise Illegal(Code.REPLAYED, "replayed placement: this sealed box was already used in this game")
        if error := placement_error(player.fleet, ev.ship, ev.placement):
            raise error
        if player.fleet.get(ev.ship) == ev.placement:
            return f"{ev.name}'s {ev.ship} is there already (no change)"  # nothing to journal or tell
        if player.placements >= PLACEMENTS_CAP:
            raise Illegal(Code.TOO_MANY, f"too many placements: {PLACEMENTS_CAP} this game; the fleet stays as it is")
        player.placements += 1
        if ev.nonce is not None:
            player.nonces[ev.nonce] = f"{ev.name}/{ev.ship}"
        moved = ev.ship in player.fleet
        was_complete = player.complete
        player.fleet[ev.ship] = ev.placement
        self._pub(out, self.topics.approved(ev.name, ev.ship), TRUE)
        if player.complete and not was_complete:
            self.ready.append(ev.name)
        summary = f"{ev.name} {'moved' if moved else 'placed'} {ev.ship} ({len(player.fleet)}/5)"
        # Every fleet complete: ``ready`` holds each player once their fleet is.
        if len(self.players) >= self.config.min_players and len(self.ready) == len(self.players):
            self._start(ev.now, out)
            summary += "; all fleets complete, game starts"
        return summary

    def _tick(self, now: float, out: list[Publish]) -> str:
        if self.deadline is None or now < self.deadline:
            return "nothing due"
        if self.phase is Phase.TURN:
            note, args = self._end_salvo(now, out, timed_out=True)
            return "turn timed out; " + note % args
        if self.phase is Phase.OVER:
            self._reset(out)
            return f"reset: game {self.game_no} opens in the lobby"
        # Whoever has no complete fleet by now leaves the lobby, whether the
        # game starts or not: names that join and never place cannot keep it full.
        left_out = self._remove_incomplete(out)
        if len(self.ready) >= 2:
            self._start(now, out)
            return f"placement deadline: game starts, left out {left_out or 'nobody'}"
        # Fewer than two complete fleets: the lobby stays open and tries again
        # after another full placement period (a stale deadline would never
        # fire); with nobody left in it, it waits for the next join.
        if self.players:
            self._pub_deadline(out, "placement", now + self.config.placement_timeout)
        else:
            self.deadline = None
            self._pub(out, self.topics.deadline, "")
        if left_out:
            self._pub_players(out, list(self.players))
        return (
            f"placement deadline: only {len(self.ready)} complete fleet(s); lobby stays open;"
            f" removed {left_out or 'nobody'}"
        )

    def _remove_incomplete(self, out: list[Publish]) -> list[str]:
        """Remove every joined player whose fleet is incomplete, telling each
        why and clearing their ships' retained approvals; who was removed."""
        gone = [name for name, player in self.players.items() if not player.complete]
        t = self.topics
        for name in gone:
            del self.players[name]
            report = error_report(
                t.deadline, "left out: your fleet was incomplete when the placement deadline passed", Code.LEFT_OUT
            )
            self._pub(out, t.player_error(name), report, retain=False)
            for ship in SHIP_IDS:
                self._pub(out, t.approved(name, ship), "")
        return gone

    def _burn(self, ev: Burn) -> str:
        player = self.players.get(ev.player)
        if player is None:
            raise Illegal(Code.UNKNOWN_TARGET, f"{ev.player!r} is not a player of this game")
        if ev.nonce in player.nonces:
            raise Illegal(Code.REPLAYED, "replayed signature: its nonce is spent already")
        if player.burned >= BURN_CAP:
            raise Illegal(Code.BUSY, f"{ev.player} spent {BURN_CAP} nonces on rejected messages: no more are kept")
        player.burned += 1
        player.nonces[ev.nonce] = False
        return f"{ev.player}'s rejected signature: nonce spent"

    def _extend(self, ev: Extend, out: list[Publish]) -> str:
        if self.deadline is None or self.phase is Phase.OVER or ev.seconds <= 0:
            return "no running deadline to extend"
        phase = "turn" if self.phase is Phase.TURN else "placement"
        self._pub_deadline(out, phase, self.deadline + ev.seconds)
        return f"{phase} deadline extended by {ev.seconds:.3f} s"

    def _start(self, now: float, out: list[Publish]) -> None:
        self.order = list(self.ready)
        self.after = dict(zip(self.order, self.order[1:] + self.order[:1], strict=True))
        # Fleets are fixed from here on: the cell -> ship map the shots look up.
        for name in self.order:
            player = self.players[name]
            player.occupied = {c: s for s, p in player.fleet.items() for c in p.cells(FLEET[s])}
        self.phase = Phase.TURN
        self.started_at = now
        self._pub_players(out, self.order)
        self._pub(out, self.topics.state, Phase.TURN.value)
        rng = random.Random(f"{self.seed}/{self.game_no}")
        self._begin_turn(self.order[rng.randrange(len(self.order))], now, out)

    # -- turns ----------------------------------------------------------------------

    def _begin_turn(self, name: str, now: float, out: list[Publish]) -> None:
        self.turn = turn = self.turn + 1
        self.current = name
        player = self.players[name]
        self.allowed = allowed = player.afloat
        self.fired = self.salvo_hits = 0
        self.sank = False
        self.deadline = at = now + self.config.turn_timeout
        # _pub_deadline and three _pub calls, inlined: every salvo ends here.
        t, retained = self.topics, self.retained
        retained[t.deadline] = deadline = _DEADLINE % ("turn", at)
        retained[t.turn] = announce = f'{{"turn":{turn},"player":{player.quoted},"shots":{allowed}}}'
        retained[t.current] = name
        out += (
            _new(Publish, (t.deadline, deadline, True, False)),
            _new(Publish, (t.turn, announce, True, False)),
            _new(Publish, (t.current, name, True, False)),
        )

    def _fire(self, ev: Fire) -> Accepted:
        current = self.current
        if current is None:  # there is a current player exactly while a turn is on
            raise Illegal(Code.NOT_IN_TURN, f"not in a turn (state {self.phase.value})")
        shooter_name, name, x, y, turn, game, nonce, now = ev
        players = self.players
        if nonce is not None and (sender := players.get(shooter_name)) is not None and nonce in sender.nonces:
            raise Illegal(Code.REPLAYED, "replayed signature: this signature was already used in this game")
        if game is not None and game != self.game_id:
            raise Illegal(Code.WRONG_GAME, f"wrong game: the message is for game {game!r}, this is {self.game_id!r}")
        if turn is not None and turn != self.turn:
            raise Illegal(Code.WRONG_TURN, f"wrong turn: the message is for turn {turn}, this is turn {self.turn}")
        if shooter_name != current:
            raise Illegal(Code.NOT_CURRENT_PLAYER, f"not your turn: it is {current}'s")
        if not (0 <= x < BOARD_SIZE and 0 <= y < BOARD_SIZE):  # rules.on_board, inlined: hot path
            raise Illegal(Code.OFF_BOARD, f"off the board: ({x}, {y}); x and y must be 0..{BOARD_SIZE - 1}")
        # From the start of a game its players are its participants.
        target = players.get(name)
        if target is None:
            raise Illegal(Code.UNKNOWN_TARGET, f"unknown target {name!r}: not a player in this game")
        if target.defeated_in_turn is not None:
            raise Illegal(Code.DEFEATED_TARGET, f"target {name!r} is already defeated")
        c = y * BOARD_SIZE + x  # rules.cell
        shooter = players[current]
        if nonce is not None:
            shooter.nonces[nonce] = name
        shooter.shots += 1
        self.fired = fired = self.fired + 1
        ship = target.occupied.get(c)
        if ship is not None:
            shooter.hits += 1
            self.salvo_hits += 1
            damage = target.damage[ship]
            damage.add(c)
            if len(damage) == FLEET[ship]:
                self.sank = True  # (or hit again): the salvo's end looks for sinks
        out = [_new(Publish, (target.hit_topic, f'{_HIT_HEADS[c]}{self.turn},"shot":{fired}}}', False, False))]
        allowed = self.allowed  # (the salvo's end sets the next turn's)
        if fired < allowed:
            return _new(Accepted, (out, "%s fired at %s (%d,%d) %d/%d", (current, name, x, y, fired, allowed)))
        end_note, end_args = self._end_salvo(now, out, timed_out=False)
        note = "%s fired at %s (%d,%d) %d/%d; " + end_note
        return _new(Accepted, (out, note, (current, name, x, y, fired, allowed, *end_args)))

    def _end_salvo(self, now: float, out: list[Publish], *, timed_out: bool) -> tuple[str, tuple[object, ...]]:
        """Close the salvo in progress; what happened, as ``note % args``."""
        current = self.current
        assert current is not None
        t = self.topics
        players = self.players
        shooter = players[current]
        fired, hits = self.fired, self.salvo_hits
        # 1. hits and the salvo record
        self.retained[t.salvo] = record = (
            f'{{"turn":{self.turn},"player":{shooter.quoted},"shots":{fired},"hits":{hits}}}'
        )
        out += (_new(Publish, (t.hits, str(hits), False, False)), _new(Publish, (t.salvo, record, True, False)))
        shooter.missed = shooter.missed + 1 if timed_out and not fired else 0
        # 2-3. sinks and defeats. Most salvos have neither: a sink needs a shot
        # that completed a ship's damage (_fire says so), a drop a missed turn.
        if self.sank or shooter.missed:
            alive = self._sinks_and_defeats(shooter, out)
            if len(alive) <= 1:
                self._game_over(alive[0] if alive else None, now, out)
                return "salvo of %s ends: %d shots, %d hits; game over, winner %s", (
                    current,
                    fired,
                    hits,
                    self.winner or "nobody",
                )
        # 4. the next one after the shooter in play order who is still in:
        # at least two are, so the walk ends before it comes round.
        after = self.after
        nxt = after[current]
        while players[nxt].defeated_in_turn is not None:
            nxt = after[nxt]
        self._begin_turn(nxt, now, out)
        return "salvo of %s ends: %d shots, %d hits", (current, fired, hits)

    def _sinks_and_defeats(self, shooter: PlayerState, out: list[Publish]) -> list[str]:
        """Announce the ships sunk in this salvo, then the players defeated by
        it, each in play order; who is still in."""
        t = self.topics
        players = self.participants()
        for p in players:
            sunk = p.sunk
            if len(sunk) == len(SHIP_IDS):
                continue
            for ship, damage in p.damage.items():  # SHIP_IDS order
                if len(damage) == FLEET[ship] and ship not in sunk:
                    sunk.append(ship)
                    if p is not shooter:
                        shooter.ships_sunk += 1
                    self._pub(out, t.sunk(p.name, ship), TRUE)
        for p in players:
            if p.defeated_in_turn is not None:
                continue
            if len(p.sunk) == len(SHIP_IDS):
                p.defeated_in_turn, p.reason = self.turn, "sunk"
            elif p is shooter and shooter.missed >= self.config.max_missed_turns:
                p.defeated_in_turn, p.reason = self.turn, "timeout"
            else:
                continue
            self._pub(out, t.defeated(p.name), TRUE)
        return [p.name for p in players if p.defeated_in_turn is None]

    # -- over -----------------------------------------------------------------------

    def _game_over(self, winner: str | None, now: float, out: list[Publish]) -> None:
        t = self.topics
        self.phase = Phase.OVER
        self.winner = winner
        self.current = None
        players = self.participants()
        final = [p for p in players if p.defeated_in_turn == self.turn]
        if winner is None:
            termination = Termination.DRAW
        elif all(p.reason == "timeout" for p in final):
            termination = Termination.FORFEIT
        else:
            termination = Termination.VICTORY
        summary = {
            "winner": winner,
            "turns": self.turn,
            "shots": sum(p.shots for p in players),
            "hits": sum(p.hits for p in players),
            "duration_s": round(now - (self.started_at or now), 3),
            "termination": termination.value,
        }
        self._pub(out, t.winner, winner or "")
        self._pub(out, t.stats_summary, dumps(summary))
        for p in players:
            self._pub(out, t.stats_player(p.name), dumps(self._player_stats(p, players)))
        self._pub(out, t.current, "")
        self._pub_deadline(out, "reset", now + self.config.reset_after)
        self._pub(out, t.state, Phase.OVER.value)

    @staticmethod
    def _player_stats(p: PlayerState, players: list[PlayerState]) -> dict[str, Any]:
        def lasted(q: PlayerState) -> float:
            return float("inf") if q.defeated_in_turn is None else q.defeated_in_turn

        return {
            "place": 1 + sum(lasted(q) > lasted(p) for q in players),
            "shots": p.shots,
            "hits": p.hits,
            "accuracy": round(p.hits / p.shots, 4) if p.shots else 0.0,
            "ships_sunk": p.ships_sunk,
            "ships_lost": len(p.sunk),
            "defeated_in_turn": p.defeated_in_turn,
            "reason": p.reason,
        }

    def _reset(self, out: list[Publish]) -> None:
        t = self.topics
        for topic in [topic for topic in self.retained if topic not in (t.state, t.game_id)]:
            self._pub(out, topic, "")
        self.game_no += 1
        self._new_game()
        # The new id first: a client that sees the lobby has the id to sign with.
        self._pub(out, t.game_id, self.game_id)
        self._pub(out, t.state, Phase.LOBBY.value)
