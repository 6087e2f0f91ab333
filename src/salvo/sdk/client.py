"""The team SDK: play Battleship: Salvo against the referee without
hand-rolling MQTT and crypto.

    from salvo.sdk.client import SalvoClient

    with SalvoClient("ada", "ada's secret", "mqtt://ada:mqtt-password@localhost:1883") as me:
        me.join()                                   # sealed to /game/pubkey
        me.place_fleet(my_fleet)                    # retried until approved
        while (turn := me.wait_my_turn()) is not None:
            me.fire_salvo([("bob", 3, 4), ...][: turn.shots])
        print(me.view.winner)

Or hand a strategy to :meth:`SalvoClient.play`. :attr:`SalvoClient.view`
is everything this team knows (see :mod:`salvo.sdk.view`); :meth:`events` yields
what happened as typed events. The MQTT username defaults to the team name,
as the shipped ACL expects. The team key (argon2id, ~70 ms) is derived once,
on a worker thread, as soon as the client is created.

One client is one MQTT connection for as long as it lives: it reconnects
after every outage with a capped, jittered back-off (:class:`salvo.net.mqtt.Backoff`,
one log line per retry), and :meth:`SalvoClient.enter` moves it to another
arena without a new connection (a tournament's games, game after game).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import paho.mqtt.client as paho

from salvo.net.mqtt import Backoff, Broker, connect_async, new_client, read_qos
from salvo.sdk import view as sdk_view
from salvo.sdk.outcomes import (
    GameAborted,
    GameRecord,
    JoinRefused,
    LobbyClosed,
    PlacementRefused,
    TurnToPlay,
)
from salvo.sdk.strategy import Strategy
from salvo.sdk.view import ErrorReported, GameEvent, Observer, PlayersChanged, RefereePresence, ShipApproved, Shot, View
from salvo.spec import codec, crypto, payloads, wire
from salvo.spec.errors import Code
from salvo.spec.rules import SHIP_IDS, Placement
from salvo.spec.topics import Inbound, Topics, name_error

log = logging.getLogger("salvo.client")

#: Events kept for waiters; older ones are dropped (a bot may run all night).
EVENT_LOG = 5000
#: A repeat join is a silent no-op; this long we listen for a "name taken".
REPEAT_JOIN_GRACE_S = 1.0
#: An unanswered participation request is sent again this often: a referee
#: killed while deriving the key lost it (repeats of a join are harmless).
JOIN_RESEND_S = 5.0
#: How long a placement error waits for our own approval on the same ship.
APPROVAL_GRACE_S = 0.5
#: A "busy" join refusal (the referee is checking other joins) is retried after this.
BUSY_RETRY_S = 0.5
#: A salvo still not resolved this long after it was sent goes out again (unchanged).
SALVO_RESEND_S = 3.0
#: close() waits this long at most for the broker to stop sending before the DISCONNECT.
CLOSE_GRACE_S = 0.5
#: Shots remembered by signature to resolve a refusal without a shot (v2.1): a few salvos'.
SIGNED_KEPT = 64


@functools.cache
def _key_pool() -> ThreadPoolExecutor:
    # Made with the first client, not at import: importing the SDK (a CLI
    # command, a test collection) starts no threads.
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="salvo-key")


@functools.lru_cache(maxsize=64)
def _derive(name: str, secret: str) -> Future[bytes]:
    # One derivation per (name, secret) per process, however many clients.
    return _key_pool().submit(crypto.derive_team_key, name, secret)


class SalvoClient:
    """One team's connection to a referee (one arena at a time: :meth:`enter`)."""

    def __init__(
        self,
        name: str,
        secret: str,
        broker: str | Broker = "mqtt://localhost:1883",
        *,
        prefix: str = "",
        username: str | None = None,
        password: str | None = None,
        sealed: bool = True,
        client_id: str | None = None,
        ca_file: str | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if err := name_error(name):
            raise ValueError(err)
        self.name = name
        self.topics = Topics(prefix)
        self.sealed = sealed
        self._secret = secret
        self._key = _derive(name, secret)
        target = Broker.from_url(broker) if isinstance(broker, str) else broker
        if ca_file is not None:
            target = target.with_ca_file(ca_file)
        self.broker = target.with_credentials(username or target.username or name, password)
        self.view = View(name)
        self._observer = Observer(self.view, self.topics)
        self._cond = threading.Condition()
        # Every event with whether it was live (not a replay of retained state
        # after a subscribe): only live events answer a request.
        self._events: list[tuple[GameEvent, bool]] = []
        self._dropped = 0  # events trimmed from the front of _events
        self._listeners: list[Callable[[GameEvent], None]] = []
        self._fired: tuple[int, int] = (-1, 0)  # (game, turn) of my last salvo
        #: (game, turn, [(topic, payload)], when sent) of my last salvo, to
        #: send again while it is not resolved (see _resend_unresolved)
        self._salvo: tuple[int, int, list[tuple[str, str]], float] = (-1, 0, [], 0.0)
        #: shots signed lately, by the start of their signature (v2.1 refusals echo it)
        self._signed: dict[str, Shot] = {}
        self._resender: threading.Thread | None = None
        self._connected = threading.Event()
        self._closed = False
        self._closing = threading.Lock()  # one close() at a time does the disconnecting
        self._refused: str | None = None
        #: topics outside the arena this client also reads: topic -> latest payload
        self._extra: dict[str, bytes | None] = {}
        self._mqtt = new_client(self.broker, client_id or f"salvo-{name}-{os.urandom(4).hex()}")
        self._mqtt.backoff = backoff or Backoff()
        self._mqtt.on_connect = self._on_connect
        self._mqtt.on_message = self._on_message
        self._mqtt.on_disconnect = lambda *_: self._connected.clear()

    # -- connection ---------------------------------------------------------------

    def connect(self, timeout: float = 10.0) -> SalvoClient:
        """Connect, waiting up to ``timeout`` for the broker: ConnectionError
        if it cannot be reached by then, ConnectionRefusedError as soon as it
        refuses the login. Once connected, outages are retried for good."""
        connect_async(self._mqtt, self.broker)
        self._mqtt.loop_start()
        with self._cond:
            self._cond.wait_for(lambda: self._connected.is_set() or self._refused is not None, timeout)
        if not self._connected.is_set():
            self._mqtt.loop_stop()
            if self._refused:  # credentials or authorisation: the caller decides
                raise ConnectionRefusedError(self._refused)
            raise ConnectionError(f"cannot reach the broker at {self.broker.url}")
        self._start_resender()
        return self

    def start(self) -> SalvoClient:
        """Start connecting and return at once: the client keeps trying,
        with back-off, until it is connected and after every outage, until
        :meth:`close`. A refused login is retried too (an organiser may fix
        the password file meanwhile) and logged as a refusal. A service
        (``salvo bot``) starts this way; waiting calls just wait meanwhile."""
        connect_async(self._mqtt, self.broker)
        self._mqtt.loop_start()
        self._start_resender()
        return self

    def _start_resender(self) -> None:
        if self._resender is None:
            self._resender = threading.Thread(target=self._resend_unresolved, name="salvo-resend", daemon=True)
            self._resender.start()

    def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Leave the broker; anything waiting on this client raises
        ConnectionError. Safe from any thread, and more than once (a second
        call waits for the first).

        The broker is asked to stop sending first (unsubscribe, up to
        ``grace`` seconds for its answer), so the DISCONNECT is the last
        word: a socket closed with messages still unread goes out as a TCP
        reset, and a broker that meets the reset first never reads the
        DISCONNECT (it logs a broken pipe, and would publish a will)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            filters = [*self._arena_filters(), *self._extra]
        with self._closing:
            if self._connected.is_set():
                quiet = threading.Event()
                self._mqtt.on_unsubscribe = lambda *_: quiet.set()
                if self._mqtt.unsubscribe(filters)[0] == paho.MQTT_ERR_SUCCESS:
                    quiet.wait(grace)
            self._mqtt.disconnect()
            self._mqtt.loop_stop()

    def __enter__(self) -> SalvoClient:
        return self.connect()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def key(self) -> bytes:
        """The team key (waits for the derivation started at construction)."""
        return self._key.result()

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            with self._cond:
                self._refused = f"broker refused {self.broker.username!r}: {rc}"
                self._cond.notify_all()
            return
        # Subscribing again after every (re)connect replays the retained state:
        # that is how a client resynchronises after a cut.
        with self._cond:
            self._refused = None
            filters = [*self._arena_filters(), *self._extra]
        client.subscribe([(f, read_qos(self._mqtt)) for f in filters])
        arena = f" (arena {self.topics.prefix})" if self.topics.prefix else ""
        log.info("%s: connected to the broker at %s%s", self.name, self.broker.url, arena)
        with self._cond:
            self._connected.set()
            self._cond.notify_all()

    def _arena_filters(self) -> list[str]:
        """What this team reads of its arena."""
        if self._mqtt.mqtt5:
            # Only what the referee says: on an open broker a wildcard would
            # also bring every team's fire messages and anybody's flood.
            return [*self.topics.public_filters, self.topics.private_filter(self.name)]
        # A broker that refused MQTT 5 (NATS) keeps order only within one
        # subscription (the view needs the winner after 'over'): one filter.
        return [self.topics.team_filter]

    def also_read(self, topic: str) -> None:
        """Read ``topic`` (outside the arena, e.g. the team's tournament
        assignment) on this connection too, from now on and after every
        reconnect; :meth:`latest` has its latest payload."""
        with self._cond:
            if topic in self._extra:
                return
            self._extra[topic] = None
        self._mqtt.subscribe(topic, read_qos(self._mqtt))  # (not connected: _on_connect does it)

    def latest(self, topic: str) -> bytes | None:
        """The latest payload on a topic given to :meth:`also_read` (None: nothing yet)."""
        with self._cond:
            return self._extra.get(topic)

    def enter(self, prefix: str) -> None:
        """Play in arena ``prefix`` from now on, on the same connection:
        this arena's view is forgotten and the new arena's topics are read
        (their retained state arrives as after a reconnect)."""
        topics = Topics(prefix)
        with self._cond:
            if topics.prefix == self.topics.prefix:
                return
            old = self._arena_filters()
            self.topics = topics
            self.view = View(self.name)
            self._observer = Observer(self.view, topics)
            self._fired = (-1, 0)
            self._salvo = (-1, 0, [], 0.0)
            new = self._arena_filters()
            self._cond.notify_all()
        # (Not connected: nothing to change; _on_connect subscribes to the new arena.)
        self._mqtt.unsubscribe(old)
        self._mqtt.subscribe([(f, read_qos(self._mqtt)) for f in new])

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            if msg.topic in self._extra:
                self._extra[msg.topic] = bytes(msg.payload)
                self._cond.notify_all()
                return
            event = self._observer.feed(msg.topic, bytes(msg.payload), retained=msg.retain)
            if event is not None:
                self._events.append((event, not msg.retain))
                if len(self._events) > 2 * EVENT_LOG:
                    del self._events[:EVENT_LOG]
                    self._dropped += EVENT_LOG
            self._cond.notify_all()
        if event is not None:
            if isinstance(event, RefereePresence) and event.up and not msg.retain:
                self._send_salvo_again()
            for listener in self._listeners:
                listener(event)

    def _send_salvo_again(self, older_than: float = 0.0) -> None:
        """Send this turn's salvo again, unchanged, if it is still not
        resolved (and was sent at least ``older_than`` seconds ago). Shots can
        be lost on the way: a broker without persistence drops what arrives
        before the referee subscribes again after a restart, and a broker
        drops what exceeds the referee's queue while someone floods it. The
        referee takes each signature once and ignores a copy of one it took."""
        now = time.monotonic()
        with self._cond:
            game, turn, messages, sent = self._salvo
            if now - sent < older_than or (game, turn) != (self.view.game, self.view.turn):
                return
            if not self.view.my_turn():
                return
            self._salvo = (game, turn, messages, now)
        for topic, payload in messages:
            self._mqtt.publish(topic, payload, qos=1)

    def _resend_unresolved(self) -> None:
        """The client's watchdog thread: a salvo not resolved within
        SALVO_RESEND_S is sent again, as long as the turn lasts."""
        while not self._closed:
            with self._cond:
                self._cond.wait_for(lambda: self._closed, SALVO_RESEND_S / 2)
            if not self._closed:
                self._send_salvo_again(older_than=SALVO_RESEND_S)

    # -- waiting ----------------------------------------------------------------

    def on_event(self, listener: Callable[[GameEvent], None]) -> None:
        """Call ``listener(event)`` for every event (on the network thread: keep it short)."""
        self._listeners.append(listener)

    def events(self, timeout: float | None = None) -> Iterator[GameEvent]:
        """Events from the moment of this call on, as they happen; the
        iterator ends after ``timeout`` seconds of silence."""
        return self._events_from(self._mark(), timeout)

    def _events_from(self, seen: int, timeout: float | None) -> Iterator[GameEvent]:
        while fresh := self._next_events(seen, timeout):
            seen += len(fresh)
            yield from fresh

    def _next_events(self, seen: int, timeout: float | None) -> list[GameEvent]:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._mark() > seen, timeout)
            return [] if self._closed else [e for e, _live in self._events[max(0, seen - self._dropped) :]]

    def wait_until(self, predicate: Callable[[View], bool], timeout: float | None = 30.0) -> bool:
        """Wait until ``predicate(view)`` holds; False on timeout."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._closed or predicate(self.view), timeout)
            if self._closed:
                raise ConnectionError("the client was closed")
            return done

    def _mark(self) -> int:
        with self._cond:
            return self._dropped + len(self._events)

    def _since(self, mark: int) -> list[GameEvent]:
        """Live events since ``mark``: the referee's answers, not replays."""
        return [e for e, live in self._events[max(0, mark - self._dropped) :] if live]

    # -- playing ------------------------------------------------------------------

    def _publish(self, topic: str, payload: str) -> None:
        # QoS 1 without waiting for the PUBACK: every step waits for the
        # referee's answer anyway, a salvo pipelines, and paho keeps and
        # resends messages published during a short cut.
        if self._closed:
            raise ConnectionError("the client was closed")
        self._mqtt.publish(topic, payload, qos=1)

    def join(self, timeout: float = 30.0, repeat_grace: float = REPEAT_JOIN_GRACE_S) -> None:
        """Join the lobby; returns once the referee lists this team. Raises
        :class:`JoinRefused` with the referee's code and reason. If the team
        is listed already (say, after a restart) the referee stays silent
        unless the secret is wrong: ``repeat_grace`` is how long to listen.

        Refusals come on the public ``/game/errors``; only one that echoes
        this join's random ``request_id`` is believed, so nobody can make
        this team think it was refused. ``busy`` is retried, and (v2.1)
        ``wrong_game``: a new game's id may have come since the join."""
        # /game/id too: the join names it, and it may come after /game/state.
        if not self.wait_until(lambda v: bool(v.state) and v.game_id is not None, timeout):
            raise TimeoutError("no /game/state from the referee: is it running on this prefix?")
        end = time.monotonic() + timeout
        while True:
            refusal = self._join_once(end, repeat_grace)
            if refusal is None:
                break
            if refusal.code not in (Code.BUSY, Code.WRONG_GAME) or time.monotonic() >= end:
                raise JoinRefused(refusal.error, refusal.code)
            time.sleep(min(BUSY_RETRY_S, max(0.0, end - time.monotonic())))
        self.key  # noqa: B018 - placements need the key: make sure it is ready

    def _join_once(self, end: float, repeat_grace: float) -> wire.ErrorReport | None:
        """Send one join (again every JOIN_RESEND_S while unanswered); the
        refusal addressed to it, or None once the list names this team."""
        request_id = os.urandom(12).hex()
        # (v2.1) the game it is for: the broker cannot carry it into the next lobby
        request = payloads.join_request(self.name, self._secret, request_id, self.view.game_id)
        if self.sealed:
            if not self.wait_until(lambda v: v.pubkey is not None, max(0.0, end - time.monotonic())):
                raise TimeoutError("no /game/pubkey to seal the request to (pass sealed=False?)")
            assert self.view.pubkey is not None
            request = crypto.seal_to(self.view.pubkey, request)
        mark = self._mark()
        topic = self.topics.request_participation
        self._publish(topic, request)

        def refusal() -> wire.ErrorReport | None:
            return next(
                (
                    e.report
                    for e in self._since(mark)
                    if isinstance(e, ErrorReported) and e.public and e.report.request_id == request_id
                ),
                None,
            )

        def settled(_v: View) -> bool:
            listed = any(isinstance(e, PlayersChanged) and self.name in e.players for e in self._since(mark))
            return listed or refusal() is not None

        # A new join is answered by the list; a repeat (after a restart) only
        # by a refusal: if none comes within the grace and the (retained)
        # list names us, we are in.
        if not self.wait_until(settled, repeat_grace) and self.name not in self.view.players:
            while not self.wait_until(settled, max(0.0, min(JOIN_RESEND_S, end - time.monotonic()))):
                if time.monotonic() >= end:
                    raise TimeoutError("the referee did not answer the participation request")
                self._publish(topic, request)
        with self._cond:
            return refusal()

    def place_fleet(self, fleet: dict[str, Placement], timeout: float = 30.0, retries: int = 3) -> None:
        """Place all five ships; resend a ship whose placement got an error
        that may pass (e.g. sent before the join was processed); raise
        :class:`PlacementRefused` for errors that will not."""
        if set(fleet) != set(SHIP_IDS):
            raise ValueError(f"a fleet has exactly these ships: {', '.join(SHIP_IDS)}")
        pending = dict(fleet)
        for _attempt in range(retries + 1):
            mark = self._mark()
            for ship, p in pending.items():
                self._publish(self.topics.place(self.name, ship), crypto.seal(self.key, payloads.placement(p)))

            ships = set(pending)
            if not self.wait_until(lambda _v, m=mark, s=ships: s <= self._answered(m), timeout):  # type: ignore[misc]
                raise TimeoutError(f"no answer to placements of {', '.join(pending)}")
            # An approval settles a ship. An error alone might be about somebody
            # else's message on the same topic (possible on a broker without
            # access control): give our approval a moment before believing it.
            self.wait_until(lambda _v, m=mark, s=ships: s <= self._approved(m), APPROVAL_GRACE_S)  # type: ignore[misc]
            approved = self._approved(mark)
            errors = {
                self._ship_of(e): (e.report.code, e.report.error)
                for e in self._since(mark)
                if isinstance(e, ErrorReported)
                and not e.public
                and self._ship_of(e) in pending
                and self._ship_of(e) not in approved
            }
            pending = {s: p for s, p in pending.items() if s not in approved}
            if not pending:
                return
            permanent = {s: (code, r) for s, (code, r) in errors.items() if code is not Code.NOT_JOINED}
            if permanent:
                first_code = next(iter(permanent.values()))[0]
                raise PlacementRefused("; ".join(f"{s}: {r}" for s, (_c, r) in permanent.items()), first_code)
            time.sleep(0.2 * (_attempt + 1))
        raise PlacementRefused(f"not approved after {retries} retries: {', '.join(pending)}")

    def _approved(self, mark: int) -> set[str]:
        return {e.ship for e in self._since(mark) if isinstance(e, ShipApproved) and e.approved}

    def _answered(self, mark: int) -> set[str]:
        """Ships approved or refused since ``mark``."""
        return self._approved(mark) | {
            self._ship_of(e) for e in self._since(mark) if isinstance(e, ErrorReported) and not e.public
        }

    def _ship_of(self, e: ErrorReported) -> str:
        """The ship of a refused placement (the report echoes its topic), or ""."""
        route = self.topics.parse_inbound(e.report.topic)
        return route.ship if route is not None and route.kind is Inbound.PLACE else ""

    def wait_my_turn(self, timeout: float | None = None) -> TurnToPlay | None:
        """Block until it is this team's turn (returns how many shots), or the
        game is over for this team (returns None). Joined but still in the
        lobby, it waits for the game to start."""
        game = self.view.game

        def mine(v: View) -> bool:
            return v.my_turn() and (v.game, v.turn) != self._fired

        def out(v: View) -> bool:
            if v.game != game or v.state == "over":
                return True
            if v.state == "lobby":
                return self.name not in v.players  # not joined: nothing to wait for
            return self.name in v.defeated or (bool(v.players) and self.name not in v.players)

        def ready(v: View) -> bool:
            return mine(v) or out(v)

        if not self.wait_until(ready, timeout):
            raise TimeoutError("still not my turn")
        with self._cond:
            return TurnToPlay(self.view.turn, self.view.allowed) if mine(self.view) else None

    def fire_salvo(self, shots: list[Shot]) -> None:
        """Fire this turn's shots ``(target, x, y)``, each signed for its
        target, this turn and this game (protocol v2): a signature that
        leaked would be good for nothing else."""
        if not self.wait_until(lambda v: v.game_id is not None, 10.0):
            raise TimeoutError("no /game/id from the referee to sign shots for")
        with self._cond:
            turn, game = self.view.turn, self.view.game_id or ""  # (there is one: waited for above)
            self.view.record_salvo(shots)
            self._fired = (self.view.game, turn)
            messages = []
            for target, x, y in shots:
                data = payloads.fire_data(x, y, target, turn, game)
                signed = crypto.sign(self.key, data)
                messages.append((self.topics.fire(target), json.dumps(signed)))
                self._signed[signed["signature"][: codec.SIGNATURE_ECHO]] = (target, x, y)
            self._signed = dict(list(self._signed.items())[-SIGNED_KEPT:])
            self._salvo = (self.view.game, turn, messages, time.monotonic())
        for topic, payload in messages:
            self._publish(topic, payload)

    def refused_shots(self) -> list[tuple[Shot, Code]]:
        """(v2.1) This game's refused fire messages, once each (a restart tells
        one again): each shot ``(target, x, y)`` (the report's, else the one
        signed here with the signature it echoes) and the refusal's code."""
        with self._cond:
            return sdk_view.refused(self.view.errors, self._signed)

    def wait_game_over(self, timeout: float | None = None) -> GameRecord:
        """Block until the game this team is in is over; its record."""
        game = self.view.game

        def over(v: View) -> bool:
            complete = v.state == "over" and v.summary is not None and all(p in v.stats for p in v.players)
            return complete or v.game != game

        if not self.wait_until(over, timeout):
            raise TimeoutError("the game is not over")
        with self._cond:
            v = self.view
            return GameRecord(v.game, v.winner, self.name, v.summary, v.stats.get(self.name))

    def _next_game(self, finished: int, v: View) -> bool:
        """A lobby, or a game in progress this team is in, other than ``finished``."""
        return v.game != finished and (v.state == "lobby" or (v.state == "turn" and self.name in v.players))

    def play(
        self,
        strategy: Strategy,
        games: int | None = 1,
        on_game: Callable[[GameRecord], None] | None = None,
        turn_timeout: float | None = None,
    ) -> list[GameRecord]:
        """Play ``games`` games (None: forever), joining again after every
        reset. Picks up a game in progress this team is part of, e.g. after
        a restart. Raises :class:`LobbyClosed` when the organiser closes the
        lobby under this team."""
        records: list[GameRecord] = []
        finished = -1  # the game number of the last game played
        while games is None or len(records) < games:
            self.wait_until(functools.partial(self._next_game, finished), None)
            with self._cond:
                game_no = self.view.game
            if self.view.state == "lobby":
                try:
                    self.join()
                except JoinRefused as refused:
                    if refused.code not in (Code.GAME_IN_PROGRESS, Code.LOBBY_FULL):
                        raise
                    finished = self.view.game  # sit this game out
                    continue
                self.place_fleet(strategy.place_fleet())
                self.wait_until(lambda v: v.state != "lobby" or self.name not in v.players, None)
                if self.view.state == "lobby":
                    raise LobbyClosed("the lobby was closed before the game started")
            while (turn := self.wait_my_turn(turn_timeout)) is not None:
                # The strategy thinks on a snapshot: messages keep flowing meanwhile.
                with self._cond:
                    snapshot = copy.deepcopy(self.view)
                self.fire_salvo(strategy.choose(snapshot, turn.shots))
            if self.view.state == "lobby":
                with self._cond:
                    aborted = game_no in self.view.aborted
                if aborted:
                    raise GameAborted("the organisers aborted the game")
                continue  # left out at the deadline, or the game was reset
            record = self.wait_game_over()
            records.append(record)
            if on_game is not None:
                on_game(record)
            finished = record.game
        return records
