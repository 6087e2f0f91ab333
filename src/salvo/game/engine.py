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
  TURN          salvo ends, <= 1 player left       OVER (stats, then the game record)
  TURN          salvo ends, ``pace_s`` > 0         nobody's turn until a Tick past
                                                   the pause announces the next
  OVER          Tick past reset deadline           LOBBY: a new game, a new id
  LOBBY         CloseLobby (the organiser)         players sent away, LOBBY empty
  not LOBBY     Abandon(tell) (the organiser)      players told game_aborted, LOBBY
  any           Pause / Resume (the organiser)     the clock holds / runs again
  any           Burn (an authentic, rejected       its nonce is spent for the game
                signature)
  any           anything else                      Rejected, state untouched
  ============  =================================  ===============================

* Every game has an id, and its first player is drawn from its *draw*
  (:mod:`salvo.game.identity`); a signature's nonce is spent for the rest
  of the game once it opened under a player's key, shot or not; the nonces
  of a game are forgotten at its reset (its id binds every signature to
  it), so memory stays flat.

* At the placement deadline every joined player whose fleet is incomplete is
  removed (told ``left_out``), so names that never place cannot hold the
  lobby full.
* Play order is the order in which fleets became complete; the first player
  is drawn (:meth:`Game.draw`), then play goes round the order skipping
  defeated players.
* A turn allows as many shots as the shooter has ships afloat when it starts.
  A shot hits when its cell holds a ship segment, hit before or not. Sinks and
  defeats are decided and announced only when the salvo ends, in the order
  hits -> salvo -> sunk -> defeated -> next turn / game over; until then a
  player whose last ship went down can still be targeted.
* A player who lets ``max_missed_turns`` turns in a row time out without a
  shot is dropped (defeated, reason ``timeout``).

A paused game (:class:`Pause`) keeps no deadline: the one running keeps
the seconds it had left (``paused``), as does every deadline set meanwhile,
and :class:`Resume` arms it again from its own ``now``. Messages are applied
as usual while paused; only timeouts wait.

Timers are state, not effects: :meth:`Game.next_deadline` says when the
engine next wants a :class:`Tick`, so a resumed engine needs no re-arming.
Every handler validates completely before it mutates anything, so a
:class:`Rejected` result leaves the game exactly as it was. Payloads are
:mod:`salvo.spec.payloads`' to spell, and retained state changes only through
:meth:`~salvo.spec.payloads.Retained.put`, which publishes each change.
"""

from __future__ import annotations

import copy
import hmac
import random
from collections.abc import Iterator
from typing import Any, Final

from salvo.game import salvo_end
from salvo.game.events import (
    Abandon,
    Accepted,
    Burn,
    CloseLobby,
    Config,
    Configure,
    Event,
    Extend,
    Fire,
    Join,
    Pause,
    Paused,
    Phase,
    Place,
    PlayerState,
    Rejected,
    Result,
    Resume,
    SalvoEntry,
    Tick,
)
from salvo.game.identity import Identity
from salvo.spec import payloads
from salvo.spec.codec import error_report
from salvo.spec.errors import Code, Illegal, Rejection
from salvo.spec.payloads import FALSE, TRUE, Publish, Retained, hit, message
from salvo.spec.rules import BOARD_SIZE, FLEET, SHIP_IDS, placement_error
from salvo.spec.topics import Topics

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
#: Games whose players' keys tell a late shot (a clustered broker's
#: redelivery, 30 s after a node fails) from a forgery: see ``_reset``.
EARLIER_GAMES: Final = 8


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
        draw: str | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.game_no = game_no
        self.identity = Identity(seed, id_key, game_no=game_no, game_id=game_id, draw=draw)
        self.seed, self.id_key = seed, self.identity.id_key
        #: The ids and players' keys of the games before, newest first (:meth:`earlier_signers`).
        self.earlier: list[tuple[str, dict[str, bytes]]] = []
        #: What the game holds retained on the broker; cleared at reset.
        self.retained = Retained()
        # Nothing is published at construction: the protocol layer publishes
        # ``retained`` whenever it connects.
        self.retained.put([], topics.state, Phase.LOBBY.value)
        self._new_game([])

    def _new_game(self, out: list[Publish]) -> None:
        self.game_id = self.identity.game_id(self.game_no)
        self.retained.put(out, self.topics.game_id, self.game_id)
        self.hit_end = payloads.hit_end(self.game_id)
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
        #: the salvo's shots (target, cell, hit), and every salvo so far: the record
        self.salvo_shots: list[tuple[str, int, bool]] = []
        self.salvos: list[SalvoEntry] = []
        #: the game record once it is over (/game/record's text)
        self.record: str | None = None
        #: who plays next while the room's pace holds the turn back
        self.upcoming: str | None = None
        self.deadline: float | None = None
        #: the organiser's stopped clock (a new game starts with it running)
        self.paused: Paused | None = None
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

    def earlier_signers(self) -> Iterator[tuple[str, Iterator[tuple[str, bytes]]]]:
        """The games before this one, newest first: each id and its players'
        keys (none before a reset)."""
        return ((game_id, iter(keys.items())) for game_id, keys in self.earlier)

    def nonce_seen(self, player: str, nonce: bytes) -> str | bool | None:
        """Where ``player``'s signature was taken (a shot's target, a
        placement's "name/ship"); False when it was refused; None: new."""
        known = self.players.get(player)
        return known.nonces.get(nonce) if known is not None else None

    def participants(self) -> list[PlayerState]:
        return [self.players[n] for n in self.order]

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of all mutable state, comparable with ``==``."""
        # (``earlier`` is a courtesy to late shots, not this game's state: a
        # restart, which replays this game only, starts without it; ``identity``
        # never changes, and its seed and key are compared as ``seed``, ``id_key``.)
        skip = {"config", "topics", "earlier", "identity"}
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
                note = self._abandon(event, out)
            elif isinstance(event, Pause):
                note = self._pause(event, out)
            elif isinstance(event, Resume):
                note = self._resume(event, out)
            elif isinstance(event, Configure):
                self.config = event.config
                note = f"settings now {event.config}"
            else:
                raise TypeError(f"not an engine event: {event!r}")
        except Rejection as exc:
            return Rejected(exc)
        return Accepted(out, note)

    # -- output ---------------------------------------------------------------------

    def _set_deadline(self, out: list[Publish], phase: str, at: float, now: float) -> None:
        paused = self.paused
        if paused is None:
            self.deadline = at
            self.retained.put(out, self.topics.deadline, payloads.deadline(phase, at))
            return
        # The clock is stopped: the new deadline keeps its whole length.
        self.paused = Paused(paused.reason, max(0.0, at - now), at)
        self.retained.put(out, self.topics.deadline, payloads.paused_deadline(phase, at, self.paused.left))

    def _deadline_phase(self) -> str:
        return {Phase.LOBBY: "placement", Phase.TURN: "turn", Phase.OVER: "reset"}[self.phase]

    def _retain_players(self, out: list[Publish], names: list[str]) -> None:
        t = self.topics
        self.retained.put(out, t.players_list, payloads.names(names))
        self.retained.put(out, t.players_count, payloads.count(len(names)))

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
        self.players[ev.name] = PlayerState(
            ev.name, ev.key, quoted=payloads.quote(ev.name), hit_topic=self.topics.hit(ev.name)
        )
        self._retain_players(out, list(self.players))
        for ship in SHIP_IDS:
            self.retained.put(out, self.topics.approved(ev.name, ship), FALSE)
        self._set_deadline(out, "placement", ev.now + self.config.placement_timeout, ev.now)
        return f"{ev.name} joined ({len(self.players)} in lobby)"

    def _close_lobby(self, ev: CloseLobby, out: list[Publish]) -> str:
        if self.phase is not Phase.LOBBY:
            raise Illegal(Code.GAME_IN_PROGRESS, f"game in progress (state {self.phase.value}): it is played out")
        names = list(self.players)
        for name in names:
            report = error_report(self.topics.request_participation, f"lobby closed: {ev.reason}", Code.LOBBY_CLOSED)
            out.append(message(self.topics.player_error(name), report))
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
        old = player.fleet.get(ev.ship)
        if old is not None and old == ev.placement:
            return f"{ev.name}'s {ev.ship} is there already (no change)"  # nothing to journal or tell
        if player.placements >= PLACEMENTS_CAP:
            raise Illegal(Code.TOO_MANY, f"too many placements: {PLACEMENTS_CAP} this game; the fleet stays as it is")
        player.placements += 1
        if ev.nonce is not None:
            player.nonces[ev.nonce] = f"{ev.name}/{ev.ship}"
        player.fleet[ev.ship] = ev.placement
        self.retained.put(out, self.topics.approved(ev.name, ev.ship), TRUE)
        if old is None and player.complete:  # a move leaves a fleet as complete as it was
            self.ready.append(ev.name)
        summary = f"{ev.name} {'placed' if old is None else 'moved'} {ev.ship} ({len(player.fleet)}/5)"
        # Every fleet complete: ``ready`` holds each player once their fleet is.
        if len(self.players) >= self.config.min_players and len(self.ready) == len(self.players):
            self._start(ev.now, out)
            summary += "; all fleets complete, game starts"
        return summary

    def _tick(self, now: float, out: list[Publish]) -> str:
        if self.deadline is None or now < self.deadline:
            return "nothing due"
        if self.upcoming is not None:
            self._begin_turn(self.upcoming, now, out)
            return f"the room's pause ends: turn {self.turn}, {self.current}'s"
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
            self._set_deadline(out, "placement", now + self.config.placement_timeout, now)
        else:
            self.deadline = None
            self.retained.put(out, self.topics.deadline, "")
        if left_out:
            self._retain_players(out, list(self.players))
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
            out.append(message(t.player_error(name), report))
            for ship in SHIP_IDS:
                self.retained.put(out, t.approved(name, ship), "")
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
        paused, at, now = self.paused, self.deadline, ev.now
        if paused is not None:  # more time left once the clock runs again
            at, now = paused.at, paused.at - paused.left
        if at is None or self.phase is Phase.OVER or self.upcoming is not None or ev.seconds <= 0:
            return "no running deadline to extend"
        self._set_deadline(out, phase := self._deadline_phase(), at + ev.seconds, now)
        return f"{'paused ' if paused else ''}{phase} deadline extended by {ev.seconds:.3f} s"

    def _pause(self, ev: Pause, out: list[Publish]) -> str:
        at = self.deadline
        if self.paused is not None or at is None:
            return "already paused" if self.paused else "no running deadline to pause"
        self.paused, self.deadline = Paused(ev.reason, 0.0, at), None
        self._set_deadline(out, phase := self._deadline_phase(), at, ev.now)
        return f"{phase} clock paused ({ev.reason}): {max(0.0, at - ev.now):.3f} s left"

    def _resume(self, ev: Resume, out: list[Publish]) -> str:
        paused, self.paused = self.paused, None
        if paused is None:
            return "not paused"
        self._set_deadline(out, phase := self._deadline_phase(), ev.now + paused.left, ev.now)
        return f"{phase} clock runs again: {paused.left:.3f} s left"

    def _abandon(self, ev: Abandon, out: list[Publish]) -> str:
        old, names = self.game_no, list(self.players)
        if ev.tell:  # the organiser's abort: the game's players hear why
            if self.phase is Phase.OVER:
                raise Illegal(Code.GAME_IN_PROGRESS, "the game is over: its result stands")
            for name in names:
                report = error_report(self.topics.state, f"game aborted: {ev.reason}", Code.GAME_ABORTED)
                out.append(message(self.topics.player_error(name), report))
        self._reset(out)
        return f"game {old} abandoned ({ev.reason}); told {names if ev.tell else 'nobody'}; game {self.game_no} opens"

    def _start(self, now: float, out: list[Publish]) -> None:
        self.order = list(self.ready)
        self.after = dict(zip(self.order, self.order[1:] + self.order[:1], strict=True))
        # Fleets are fixed from here on: the cell -> ship map the shots look up.
        for name in self.order:
            player = self.players[name]
            player.occupied = {c: s for s, p in player.fleet.items() for c in p.cells(FLEET[s])}
        self.phase = Phase.TURN
        self.started_at = now
        self._retain_players(out, self.order)
        self.retained.put(out, self.topics.state, Phase.TURN.value)
        rng = random.Random(self.draw())
        self._begin_turn(self.order[rng.randrange(len(self.order))], now, out)

    def draw(self) -> str:
        """What this game's first player is drawn from (:mod:`salvo.game.identity`)."""
        return self.identity.draw(self.game_no)

    # -- turns ----------------------------------------------------------------------

    def _begin_turn(self, name: str, now: float, out: list[Publish]) -> None:
        self.turn = turn = self.turn + 1
        self.current = name
        player = self.players[name]
        self.allowed = allowed = player.afloat
        self.fired = self.salvo_hits = 0
        self.sank = False
        self.salvo_shots = []
        self.upcoming = None
        t = self.topics
        self._set_deadline(out, "turn", now + self.config.turn_timeout, now)
        self.retained.put(out, t.turn, payloads.turn(turn, player.quoted, allowed))
        self.retained.put(out, t.current, name)

    def _fire(self, ev: Fire) -> Accepted:
        current = self.current
        if current is None:  # there is a current player exactly while a turn is on
            if self.upcoming is not None:
                raise Illegal(Code.NOT_IN_TURN, "between turns: wait for the next /game/turn")
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
        self.salvo_shots.append((name, c, ship is not None))
        if ship is not None:
            shooter.hits += 1
            self.salvo_hits += 1
            damage = target.damage[ship]
            damage.add(c)
            if len(damage) == FLEET[ship]:
                self.sank = True  # (or hit again): the salvo's end looks for sinks
        out = [hit(target.hit_topic, c, self.turn, fired, self.hit_end)]
        allowed = self.allowed  # (the salvo's end sets the next turn's)
        if fired < allowed:
            return Accepted(out, "%s fired at %s (%d,%d) %d/%d", (current, name, x, y, fired, allowed))
        end_note, end_args = self._end_salvo(now, out, timed_out=False)
        note = "%s fired at %s (%d,%d) %d/%d; " + end_note
        return Accepted(out, note, (current, name, x, y, fired, allowed, *end_args))

    def _end_salvo(self, now: float, out: list[Publish], *, timed_out: bool) -> tuple[str, tuple[object, ...]]:
        """Close the salvo in progress; what happened, as ``note % args``."""
        current = self.current
        assert current is not None
        t = self.topics
        players = self.players
        shooter = players[current]
        fired, hits = self.fired, self.salvo_hits
        # 1. hits and the salvo record
        out.append(message(t.hits, payloads.count(hits)))
        self.retained.put(out, t.salvo, payloads.salvo(self.turn, shooter.quoted, fired, hits))
        shooter.missed = shooter.missed + 1 if timed_out and not fired else 0
        # 2-3. sinks and defeats. Most salvos have neither: a sink needs a shot
        # that completed a ship's damage (_fire says so), a drop a missed turn.
        entry = SalvoEntry(self.turn, current, self.salvo_shots, hits, (), ())
        self.salvos.append(entry)
        if self.sank or shooter.missed:
            alive, sunk, defeated = salvo_end.sinks_and_defeats(
                self.participants(), shooter, self.turn, self.config.max_missed_turns, self.retained, t, out
            )
            self.salvos[-1] = entry._replace(sunk=sunk, defeated=defeated)
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
        if self.config.pace_s <= 0:
            self._begin_turn(nxt, now, out)
            return "salvo of %s ends: %d shots, %d hits", (current, fired, hits)
        # The room's pace: nobody's turn until a Tick announces the next one.
        self.current, self.upcoming = None, nxt
        if self.paused is None:
            self.deadline = now + self.config.pace_s
        else:  # the organiser's stopped clock holds the pause too
            self.paused = self.paused._replace(left=self.config.pace_s, at=now + self.config.pace_s)
        return "salvo of %s ends: %d shots, %d hits; next turn in %.3f s", (current, fired, hits, self.config.pace_s)

    # -- over -----------------------------------------------------------------------

    def _game_over(self, winner: str | None, now: float, out: list[Publish]) -> None:
        t = self.topics
        self.phase = Phase.OVER
        self.winner = winner
        self.current = None
        duration = now - (self.started_at or now)
        self.record = salvo_end.publish_results(
            self.game_id, self.participants(), winner, self.turn, duration, self.salvos, self.retained, t, out
        )
        self.retained.put(out, t.current, "")
        self._set_deadline(out, "reset", now + self.config.reset_after, now)
        self.retained.put(out, t.state, Phase.OVER.value)

    def _reset(self, out: list[Publish]) -> None:
        t = self.topics
        # A shot of the game that ends may still be delivered (a clustered
        # broker redelivers an unacknowledged one after a node fails):
        # its players' keys tell it from a forgery (see earlier_signer).
        # JetStream redelivers it ack_wait (30 s) after the node failed, and
        # short games (a few seconds each) go by meanwhile: not just the
        # previous game's keys, the last EARLIER_GAMES games'. (A bound: a
        # forgery costs one more microsecond try per key.)
        keys = {name: p.key for name, p in self.players.items()}
        self.earlier = [(self.game_id, keys), *self.earlier][:EARLIER_GAMES]
        for topic in [topic for topic in self.retained if topic not in (t.state, t.game_id)]:
            self.retained.put(out, topic, "")
        self.game_no += 1
        # The new id first: a client that sees the lobby has the id to sign with.
        self._new_game(out)
        self.retained.put(out, t.state, Phase.LOBBY.value)
