"""The MQTT adapter: paho callbacks become arena inputs, effects become publishes.

Threads, and why:

* one *arena thread* drives every arena's two paho connections itself
  (paho's external-loop API: one ``select`` on all their sockets, then
  ``loop_read``/``loop_write``/``loop_misc``; no ``loop_start`` threads) and
  owns the :class:`~salvo.protocol.Arena` objects. paho's callbacks, which
  run inside ``loop_read``, only hand messages off to their arena's inbox;
  after each read the thread applies what was handed off as one batch,
  executes the effects in order (persist, then publish) and then
  acknowledges the messages (manual QoS 1 acks: a message is acknowledged
  only once its outcome is durable, so a crash makes the broker redeliver
  it). It also fires the timers and reconnects with back-off. One thread,
  not one per arena or three: every hand-over between threads costs a GIL
  switch, and under load those switches, not the game, were most of the
  referee's CPU (see docs/performance.md).
* a shared thread pool derives argon2id keys (70 ms, 64 MiB each; libsodium
  releases the GIL), so joins never stall other messages; results come back
  through a queue and a wake-up socket.

Every arena has its own MQTT connection because the retained last will
(``/game/server`` = ``down``) is per connection.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import os
import queue
import random
import select
import socket
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Protocol

import paho.mqtt.client as paho
from nacl.public import PrivateKey
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from salvo import crypto
from salvo.engine import Config, Event, Fire, Game, Publish, Rejected
from salvo.errors import Code, Illegal, Rejection
from salvo.mqtt import Broker, connect_async, new_client
from salvo.protocol import Arena, DeriveKey, Effect, Log, Record
from salvo.store import Store, StoreFailure
from salvo.teams import Registry
from salvo.topics import Topics

log = logging.getLogger("salvo.referee")

#: An overdue timer waits this long for queued messages (sent in time, but
#: delivered late, e.g. the backlog after a restart) and after a (re)connect.
TIMER_GRACE_S: Final = 1.0

#: QoS 0 messages waiting for the arena thread beyond this are dropped
#: (at-most-once anyway). Teams send QoS 1, which always waits its turn.
QOS0_BACKLOG: Final = 2_000

#: Error reports per second an arena sends to one error topic at most (a
#: token bucket per topic with a burst of the same size). A flood of garbage would otherwise be mirrored
#: onto /game/errors, and the broker's backlog to the referee would hold up
#: the game's own messages. Reports over the budget are counted and logged.
REPORTS_PER_S: Final = 200.0
#: Error topics with a bucket of their own at most (the longest unused go).
REPORT_BUCKETS: Final = 1024
#: At most this many queued items are handled (and journaled) as one batch.
BATCH_MAX: Final = 64
#: Spooled events wait for their SQLite commit until the arenas have nothing
#: to read, or until there are this many (see _wait).
SETTLE_MAX: Final = 256

#: QoS 1 messages paho keeps in flight at once (its default, 20, is too few
#: for a burst of shots and reports).
MAX_INFLIGHT: Final = 20
#: Rejected messages per second from which an arena counts as flooded, and
#: the most a flood may stop one turn's clock (see FloodClock).
FLOOD_PER_S: Final = 500
FLOOD_EXTENSION_MAX_S: Final = 300.0
#: Rejections logged line by line per window (see RejectionLog).
REJECT_LINES: Final = 100
REJECT_WINDOW_S: Final = 10.0


class Journal(Protocol):
    """Where accepted events are persisted (see :mod:`salvo.store`)."""

    def record_many(self, entries: list[tuple[str, int, Event]]) -> int:
        """Make the events durable (they survive this process being killed);
        the journal id of the last one. Raises StoreFailure when it cannot."""

    def settle(self) -> None:
        """Finish storing what was recorded: off the critical path, after the
        batch's results are out. Raises StoreFailure when it cannot."""

    def mark_published(self, arena: str, event_id: int) -> None:
        """The broker acknowledged everything the arena's events up to
        ``event_id`` entitled the teams to hear."""

    def check_intact(self) -> None:
        """Raise StoreFailure when the state file vanished or was replaced."""

    @property
    def pending(self) -> int:
        """Events recorded but not yet settled."""


@dataclass(frozen=True, slots=True)
class _Message:
    topic: str
    payload: bytes
    mid: int
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class _KeyDone:
    job: DeriveKey
    future: Future[bytes]


@dataclass(frozen=True, slots=True)
class _Connected:
    session_present: bool


@dataclass(frozen=True, slots=True)
class _OutConnected:
    pass


@dataclass(frozen=True, slots=True)
class _LeaseSeen:
    lease: bytes


class Stop(enum.Enum):
    """Why a referee stopped on its own; the CLI turns it into an exit code."""

    BROKER_REFUSED = "broker refused"  # credentials or authorisation: retrying will not help
    STATE = "state"  # the state file cannot be written, or vanished
    ARENA_TAKEN = "arena taken"  # another referee holds the arena now
    INTERNAL = "internal error"  # a bug


@dataclass(frozen=True, slots=True)
class Fatal:
    kind: Stop
    reason: str

    def __str__(self) -> str:
        return self.reason


#: CONNACK reason codes that retrying will not change: bad user name or
#: password, not authorized, bad authentication method.
_REFUSED: Final = (0x86, 0x87, 0x8C)
#: DISCONNECT reason code: another client connected with this client id.
_SESSION_TAKEN_OVER: Final = 0x8E
#: A runner's two connections, as log lines name them.
_CONNECTION: Final = "connection"
_PUBLISHING: Final = "publishing connection"
_OTHER: Final = {_CONNECTION: _PUBLISHING, _PUBLISHING: _CONNECTION}


@dataclass(frozen=True, slots=True)
class _CloseLobby:
    reason: str
    #: True when the lobby was closed, False when a game had started
    closed: Future[bool]


_STOP: Final = object()

#: Reconnect back-off: first retry after this, doubling up to RETRY_MAX_S,
#: each wait jittered down to half (many connections do not retry in step).
#: Capped at a second: a broker back from a restart without persistence has
#: no session for the referee, and shots sent before it resubscribes are lost.
RETRY_MIN_S: Final = 0.1
RETRY_MAX_S: Final = 1.0
#: A cut from the broker longer than this is given back to the running turn.
EXTEND_AFTER_S: Final = 0.5
#: How often the arena thread makes sure the state file is still its own.
INTACT_EVERY_S: Final = 1.0
#: paho's keepalive and timeout bookkeeping (loop_misc) runs this often.
MISC_EVERY_S: Final = 0.5


class _Link:
    """One paho connection driven by the arena thread: when it may next try
    to (re)connect, and how long it waits after a failed try."""

    def __init__(self, client: paho.Client, role: str) -> None:
        self.client = client
        self.role = role
        self.retry_at = 0.0
        self.delay = 0.0

    def connect_due(self, now: float, name: str, broker: Broker) -> None:
        """(Re)connect if the connection is down and its back-off is over.
        Failures double the wait; an accepted CONNACK resets it."""
        if self.client.socket() is not None:
            if self.client.is_connected():
                self.delay = 0.0
            return
        if now < self.retry_at:
            return
        # Set before trying: a broker that accepts TCP and then refuses the
        # CONNECT closes the socket, and must not be retried in a tight loop.
        self.delay = min(max(RETRY_MIN_S, self.delay * 2), RETRY_MAX_S)
        self.retry_at = now + self.delay * random.uniform(0.5, 1.0)
        try:
            self.client.reconnect()
        except OSError as exc:
            log.warning(
                "[%s] cannot reach broker %s (%s): %s; retrying in %.1f s", name, broker.url, self.role, exc, self.delay
            )


class ArenaRunner:
    """One arena on its MQTT connections, driven by its own thread."""

    def __init__(
        self,
        arena: Arena,
        broker: Broker,
        *,
        client_id: str,
        pool: Executor,
        journal: Journal | None = None,
        session_expiry_s: int = 3600,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        self.arena = arena
        self._registry = registry
        self.name = arena.topics.prefix or "(default)"
        self._broker = broker
        self._pool = pool
        self._journal = journal
        self._clock = clock
        self._expiry = session_expiry_s
        # The inbox. ``_high``/``_low`` are only touched by the arena thread
        # (paho's callbacks run on it): control items and QoS >= 1 messages
        # first, in order, then QoS 0 messages, so a QoS 0 flood can neither
        # delay the teams nor grow without bound. Other threads (key
        # derivations, close_lobby, stop) put into ``_control`` and wake the
        # thread through a socket pair.
        self._high: collections.deque[object] = collections.deque()
        self._low: collections.deque[_Message] = collections.deque()
        self._control: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        #: the thread that drives this arena (and maybe others), once started
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.connected = threading.Event()
        self.fatal: Fatal | None = None
        self.dropped = 0
        self._connected_at = 0.0
        # The start-up sweep of stale retained topics (see _sweep).
        self._sweeping = False
        self._stale: dict[str, bytes] = {}
        self._swept = False
        self._sweep_token = b""
        self._ever_connected = False
        t = arena.topics
        # Two connections: ``client`` subscribes (persistent session, manual
        # acks), ``out`` only publishes. A broker falling behind on a flood of
        # QoS 0 messages to us must not stall our publishing: mosquitto 2.0
        # loses PUBACKs queued behind such a backlog (eclipse/mosquitto#3542),
        # and every lost PUBACK holds one of paho's in-flight slots for good.
        # The connection that only publishes never has a backlog.
        self._client_ids = {_CONNECTION: client_id, _PUBLISHING: f"{client_id}-out"}
        # How often each connection dropped, and how often the other one had
        # when it did (see _note_reconnect).
        self._drops = dict.fromkeys(self._client_ids, 0)
        self._other_drops_then = dict.fromkeys(self._client_ids, 0)
        self.client = new_client(broker, client_id, manual_ack=True, persistent=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.out = new_client(broker, f"{client_id}-out", will=(t.server, "down"))
        self.out.on_connect = self._on_out_connect
        self.out.on_disconnect = self._on_out_disconnect
        self.out.max_inflight_messages_set(MAX_INFLIGHT)
        # ``out`` first: its last will guards everything ``client`` triggers.
        self._links = (_Link(self.out, _PUBLISHING), _Link(self.client, _CONNECTION))
        self._received = 0
        self._misc_at = 0.0
        self.dropped_reports = 0
        self.rejections = RejectionLog(self.name, clock)
        self.cleared_retained = 0
        self.poisoned = 0  # messages that met a bug (see _dispatch)
        self._flood = FloodClock(clock())
        #: The acknowledgements of join messages whose derivation is under
        #: way, by job: sent once the join's outcome is durable (or refused).
        self._held: dict[int, list[tuple[int, int]]] = {}
        #: Batches whose publishes await the broker's PUBACK, with the journal
        #: id they complete; then the journal marks them published.
        self._unacked: collections.deque[tuple[int, list[paho.MQTTMessageInfo]]] = collections.deque()
        self._mark = 0  # the journal id the batch being built completes, without records of its own
        #: When the subscribing connection was lost (to give the time back to the turn).
        self._lost_at: float | None = None
        #: This referee's lease came back from the broker: from then on
        #: another lease means the arena was taken over.
        self._lease_echoed = False
        # The batch being worked through (see _work and _flush).
        self._records: list[tuple[str, int, Event]] = []
        self._outbox: list[Publish] = []
        self._acks: list[tuple[int, int]] = []
        #: error topic -> (tokens, when refilled); see _report_budget
        self._report_buckets: dict[str, tuple[float, float]] = {}

    # -- paho callbacks: run inside loop_read on the arena thread; hand off only ------------

    def _on_connect(self, client: paho.Client, _u: Any, flags: Any, rc: ReasonCode, _p: Any) -> None:
        if rc.is_failure:
            log.error("[%s] broker %s refused the connection: %s", self.name, self._broker.url, rc)
            if not self._ever_connected and rc.value in _REFUSED:
                self._high.append(Fatal(Stop.BROKER_REFUSED, f"broker refused the connection: {rc}"))
            return
        self._ever_connected = True
        self._note_reconnect(_CONNECTION)
        # Retain-as-published (MQTT 5): a message a team published with the
        # retain flag keeps it, live or not, so the referee can clear it (a
        # retained inbound message would be re-read at every resubscribe).
        # Which referee holds the arena: watched for as long as this one runs.
        client.subscribe(self.arena.topics.lease, 0)
        filters = self.arena.topics.inbound_filters
        if self._broker.mqtt5:
            client.subscribe([(f, SubscribeOptions(qos=1, retainAsPublished=True)) for f in filters])
        else:
            client.subscribe([(f, 1) for f in filters])
        self._high.append(_Connected(bool(flags.session_present)))

    def _on_out_connect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        if rc.is_failure:
            log.error("[%s] broker %s refused the publishing connection: %s", self.name, self._broker.url, rc)
            if rc.value in _REFUSED:
                self._high.append(Fatal(Stop.BROKER_REFUSED, f"broker refused the connection: {rc}"))
            return
        # This connection's last will may have said "down" while it was away
        # (a cut, or another client taking its id over): say "up" again.
        self._note_reconnect(_PUBLISHING)
        self._high.append(_OutConnected())

    def _on_disconnect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        if self.connected.is_set() and self._lost_at is None:
            self._lost_at = self._clock()
        self.connected.clear()
        self._note_disconnect(rc, _CONNECTION)

    def _on_out_disconnect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        self._note_disconnect(rc, _PUBLISHING)

    def _note_disconnect(self, rc: ReasonCode, role: str) -> None:
        self._drops[role] += 1
        self._other_drops_then[role] = self._drops[_OTHER[role]]
        if rc.value == _SESSION_TAKEN_OVER:  # (mosquitto 2.0.11 just closes the socket)
            self._taken_over(role)
        elif rc.value != 0:
            log.warning("[%s] lost the broker (%s, %s); reconnecting", self.name, role, rc)

    def _note_reconnect(self, role: str) -> None:
        """A connection is back. If it went while the other one stayed up, the
        broker dropped it alone: most likely another client connected with
        its client id (the broker itself, or the network, would have dropped both)."""
        if self._drops[role] and self._drops[_OTHER[role]] == self._other_drops_then[role]:
            self._taken_over(role)

    def _taken_over(self, role: str) -> None:
        log.error(
            "[%s] TAKEN OVER? the broker closed this referee's %s (client id %r) while its other connection stayed"
            " up: another client connected with that id (another referee with the same --client-id, or someone who"
            " knows it). The referee took it back and says 'up' again; see docs/security.md",
            self.name,
            role,
            self._client_ids[role],
        )

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        self._received += 1
        try:
            topic = msg.topic
        except UnicodeDecodeError:  # a broker should not let this through
            topic = msg._topic.decode("utf-8", "replace")
        if topic == self.arena.topics.lease:
            self._high.append(_LeaseSeen(bytes(msg.payload)))
            return
        if self._sweeping:
            if topic == self.arena.topics.sweep:
                if bytes(msg.payload) == self._sweep_token:
                    self._swept = True
                return
            if msg.retain and self.arena.topics.parse_inbound(topic) is None:
                self._stale[topic] = bytes(msg.payload)
                return
        if msg.qos == 0:
            if self.arena.topics.parse_inbound(topic) is None:
                # Our own output, echoed by the sweep's subscription while it
                # is being taken down: not addressed to us.
                return
            if len(self._low) >= QOS0_BACKLOG:
                self.dropped += 1
                return
            self._low.append(_Message(topic, bytes(msg.payload), msg.mid, msg.qos, msg.retain))
            return
        self._high.append(_Message(topic, bytes(msg.payload), msg.mid, msg.qos, msg.retain))

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Run this arena on a thread of its own (a Referee runs all of its
        arenas on one)."""
        _ArenaThread([self]).start()

    def _begin(self) -> None:
        # Only records where to connect: the arena thread connects.
        connect_async(self.out, self._broker)
        connect_async(self.client, self._broker, session_expiry_s=self._expiry)

    def _put(self, item: object) -> None:
        """From any thread: queue a control item and wake the arena thread."""
        self._control.put(item)
        with contextlib.suppress(BlockingIOError, OSError):  # full: it is awake already
            self._wake_w.send(b"!")

    def close_lobby(self, reason: str, timeout: float = 10.0) -> bool:
        """From any thread: send everybody in this arena's lobby away. True
        when it was closed, False when a game had started (or no answer)."""
        item = _CloseLobby(reason, Future())
        self._put(item)
        try:
            return item.closed.result(timeout)
        except TimeoutError:
            return False

    def request_stop(self) -> None:
        """Ask the arena thread to publish ``down``, disconnect and end."""
        self._put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        self._stopped.wait(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopped.is_set()

    # -- driven by the arena thread ------------------------------------------------------

    def _prepare(self, mono: float, rlist: list[Any], wlist: list[Any]) -> float:
        """Before a ``select``: reconnect what is due, add this arena's
        sockets, and say how long it may wait."""
        for link in self._links:
            link.connect_due(mono, self.name, self._broker)
        deadline = self.arena.next_deadline()
        now = self._clock()
        if self._high or self._low:
            timeout = 0.0
        elif deadline is None:
            timeout = MISC_EVERY_S  # keepalive and reconnect bookkeeping
        else:
            # overdue but held (see _timer_due): look again shortly
            timeout = min(MISC_EVERY_S, max(0.1, deadline - now) if now >= deadline else deadline - now)
        return 0.0 if self._sockets(rlist, wlist) else timeout

    def _sockets(self, rlist: list[Any], wlist: list[Any]) -> bool:
        """Add this arena's sockets to a ``select``; True when it must not
        wait (TLS: bytes already decrypted, select cannot see them)."""
        rlist.append(self._wake_r)
        buffered = False
        for link in self._links:
            sock = link.client.socket()
            if sock is None:
                continue
            rlist.append(sock)
            if link.client.want_write():
                wlist.append(sock)
            buffered = buffered or _pending(sock)
        return buffered

    def _advance(self, readable: Collection[Any], writable: Collection[Any]) -> bool:
        """After a ``select``: network I/O, then the batch, then the timers.
        False once this arena has stopped (asked to, or crashed)."""
        try:
            self._io(readable, writable)
            if self._work():
                self._shutdown(say_down=self.fatal is None or self.fatal.kind is not Stop.ARENA_TAKEN)
                return False
            now = self._clock()
            if self._timer_due(self.arena.next_deadline(), now):
                self._execute(self.arena.on_tick(now))
                self._flush()
            self._note_published()
            if self._flood.due(now) and (extension := self._flood.extension(self.arena.game)):
                self._execute(self.arena.extend(extension, now))
                self._flush()
            return True
        except StoreFailure:
            raise  # the journal is every arena's: the arena thread stops them all
        except Exception as exc:
            self._crashed(exc)
            return False

    def _crashed(self, exc: Exception) -> None:
        """A bug: say so loudly, stop this arena."""
        log.exception("[%s] arena crashed", self.name, exc_info=exc)
        self.stop_with(Fatal(Stop.INTERNAL, f"internal error: {exc!r}"))

    def stop_with(self, fatal: Fatal) -> None:
        """Stop this arena for ``fatal``. Another referee now holding the arena
        is not told 'down' (that would be a lie about *its* presence)."""
        self.fatal = fatal
        with contextlib.suppress(Exception):
            self._shutdown(say_down=fatal.kind is not Stop.ARENA_TAKEN)

    def _poll(self, timeout: float) -> None:
        """One pass of network I/O for this arena alone: wait up to
        ``timeout`` for a socket, read what arrived (the callbacks fill the
        inbox), write what is queued, keep alive."""
        rlist: list[Any] = []
        wlist: list[Any] = []
        if self._sockets(rlist, wlist):
            timeout = 0.0
        self._io(*_wait([self], rlist, wlist, timeout))

    def _io(self, readable: Collection[Any], writable: Collection[Any]) -> None:
        if self._wake_r in readable:
            # Items are put before the wake-up byte is sent: one put after
            # this drain leaves its byte for the next select.
            with contextlib.suppress(BlockingIOError):
                self._wake_r.recv(4096)
            while not self._control.empty():
                self._high.append(self._control.get_nowait())
        for link in self._links:
            client = link.client
            sock = client.socket()
            if sock is None:
                continue
            if sock in readable or _pending(sock):
                # loop_read takes one packet per call (more only while QoS
                # messages are in flight): read on while messages arrive, so
                # a salvo becomes one batch with one journal commit.
                plain = type(sock) is socket.socket  # no TLS or websocket buffer in between
                for _ in range(BATCH_MAX):
                    before = self._received
                    if client.loop_read() != paho.MQTT_ERR_SUCCESS or client.socket() is None:
                        break
                    if self._received == before:
                        break
                    if plain and not select.select([sock], [], [], 0)[0]:
                        break  # nothing more yet: cheaper to ask than a loop_read that finds nothing
            if client.socket() is not None and (sock in writable or client.want_write()):
                client.loop_write()
        mono = time.monotonic()
        if mono >= self._misc_at:
            self._misc_at = mono + MISC_EVERY_S
            for link in self._links:
                if link.client.socket() is not None:
                    link.client.loop_misc()
            self.rejections.roll(self._clock())

    def _pump(self, done: Callable[[], bool], timeout: float) -> bool:
        """Network I/O only (the inbox keeps what arrives) until ``done()``."""
        end = time.monotonic() + timeout
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._poll(min(left, 0.1))
        return True

    def _work(self) -> bool:
        """Apply what the inbox holds (up to BATCH_MAX items) as one batch:
        its events are journaled in one commit before any of its publishes
        and acks go out (see _flush). True when the thread is to stop."""
        stop = False
        for _ in range(BATCH_MAX):
            if self._high:
                item: object = self._high.popleft()
            elif self._low:
                item = self._low.popleft()
            else:
                break
            if item is _STOP:
                stop = True
                break
            if isinstance(item, Fatal):
                self.fatal, stop = item, True
                break
            self._dispatch(item)
        self._flush()
        return stop

    def _sweep(self) -> None:
        """Clear retained game topics of this arena that the engine does not
        hold: left by an earlier referee without this state file, or by a
        game whose reset never ran. The referee is the arena's single source
        of truth, and it says so before it announces itself 'up'."""
        t = self.arena.topics
        filters = [*t.retained_filters, t.sweep]
        self._stale, self._sweeping, self._swept = {}, True, False
        self._sweep_token = os.urandom(8).hex().encode()
        # QoS 0: these messages are only looked at. At QoS 1 each would need
        # a (manual) ack, and unacked ones hold the broker's in-flight window
        # shut for everything else.
        self.client.subscribe([(f, 0) for f in filters])
        # A broker delivers to one subscriber in order: once our marker comes
        # back, every retained message of the subscription has arrived.
        self.client.publish(t.sweep, self._sweep_token, qos=0)
        if not self._pump(lambda: self._swept or self.client.socket() is None, 10):
            log.warning("[%s] start-up sweep incomplete: no marker back from the broker", self.name)
        self._sweeping = False
        self.client.unsubscribe(filters)
        keep = {*self.arena.game.retained, t.server, t.pubkey}
        stale = sorted(topic for topic, payload in self._stale.items() if payload and topic not in keep)
        for topic in stale:
            self.out.publish(topic, "", qos=1, retain=True)
        if stale:
            log.info("[%s] cleared %d stale retained topics, e.g. %s", self.name, len(stale), stale[0])

    def _timer_due(self, deadline: float | None, now: float) -> bool:
        """Timers wait while the broker is away (nobody could act) and briefly
        after it returns and while messages are queued: those were sent in
        time and are applied first."""
        if deadline is None or now < deadline:
            return False
        if not self.connected.is_set() or now < self._connected_at + TIMER_GRACE_S:
            return False
        return not (self._high or self._low) or now >= deadline + TIMER_GRACE_S

    def _dispatch(self, item: object) -> None:
        now = self._clock()
        if isinstance(item, _Message):
            job = None
            if item.retain:
                self._clear_retained(item)
            else:
                try:
                    effects = self.arena.on_message(item.topic, item.payload, now)
                except Exception:
                    # A bug, reached by a message someone sent: that message is
                    # dropped (and acknowledged, or it would come back at every
                    # restart), the arena plays on. The rules validate before
                    # they change anything, so the game is as it was.
                    self.poisoned += 1
                    log.exception("[%s] a message on %s broke the referee (a bug); dropped", self.name, item.topic[:99])
                    effects = []
                job = next((e for e in effects if isinstance(e, DeriveKey)), None)
                self._execute(effects)
            if item.qos > 0:
                # A join waits for its key derivation: acknowledged only once its
                # outcome is journaled (or refused), so a referee killed meanwhile
                # gets the join again from the broker.
                (self._held[id(job)] if job is not None else self._acks).append((item.mid, item.qos))
        elif isinstance(item, _KeyDone):
            exc = item.future.exception()
            if exc is None:
                self._execute(self.arena.on_key(item.job, item.future.result(), now))
            else:
                if not isinstance(exc, Rejection):
                    log.error("[%s] key derivation for %s failed", self.name, item.job.name, exc_info=exc)
                    exc = Illegal(Code.BUSY, "busy: the join could not be checked; try again")
                self._execute(self.arena.on_key_failed(item.job, exc, now))
            self._acks += self._held.pop(id(item.job), [])
        elif isinstance(item, _LeaseSeen):
            self._check_lease(item.lease)
        elif isinstance(item, _OutConnected):
            if self.connected.is_set():  # presence was announced: only "up" may have been lost
                self._outbox.append(Publish(self.arena.topics.server, "up", True))
        elif isinstance(item, _CloseLobby):
            effects = self.arena.close_lobby(item.reason, now)
            self._execute(effects)
            self._flush()
            item.closed.set_result(any(isinstance(e, Record) for e in effects))
        elif isinstance(item, _Connected):
            log.info(
                "[%s] connected to %s (session %s); publishing retained state",
                self.name,
                self._broker.url,
                "resumed" if item.session_present else "new",
            )
            self._sweep()
            # What the journal says the teams have not heard yet (a referee
            # killed between journaling and publishing), then the state.
            backlog, self.arena.backlog = self.arena.backlog, []
            self._outbox += backlog
            self._mark = self.arena.backlog_to
            self._execute(list(self.arena.presence()))
            self._flush()
            self._connected_at = self._clock()
            self.connected.set()
            if self._lost_at is not None:
                cut = self._connected_at - self._lost_at
                self._lost_at = None
                if cut > EXTEND_AFTER_S:
                    self._execute(self.arena.extend(cut, self._connected_at))
                    self._flush()

    def _clear_retained(self, item: _Message) -> None:
        """A message on an inbound topic with the retain flag: stale (left
        from before this referee subscribed) or sent retained against the
        protocol. Either way it is no action; clear it, so the broker does
        not keep it and hand it out again at every resubscribe."""
        if not item.payload:
            return  # a clearing (ours, echoed back)
        self.cleared_retained += 1
        self._outbox.append(Publish(item.topic, "", True))
        self.rejections.emit(
            Log(
                False,
                "cleared a retained message on %s (inbound topics are not retained)",
                (item.topic[:120],),
                "retained",
            )
        )

    def _execute(self, effects: list[Effect] | list[Publish]) -> None:
        for effect in effects:
            if isinstance(effect, Publish):
                if effect.expendable and not self._report_budget(effect.topic):
                    self.dropped_reports += 1
                    if self.dropped_reports % 1000 == 1:
                        log.warning(
                            "[%s] over %.0f error reports/s: %d dropped so far",
                            self.name,
                            REPORTS_PER_S,
                            self.dropped_reports,
                        )
                    continue
                self._outbox.append(effect)
            elif isinstance(effect, Record):
                self._records.append((self.arena.topics.prefix, effect.game_no, effect.event))
            elif isinstance(effect, DeriveKey):
                if id(effect) not in self._held:  # (a repeat of a join gets the job under way)
                    self._held[id(effect)] = []
                    future = self._pool.submit(_team_key, self._registry, effect)
                    future.add_done_callback(self._key_callback(effect))
            elif isinstance(effect, Log):
                if not effect.accepted:
                    self._flood.rejected += 1
                self.rejections.emit(effect)

    def _flush(self) -> None:
        """Journal the batch's events, then publish its effects, then ack its
        messages: nothing is announced or acknowledged before it is durable.
        The journal's SQLite commit comes later (its spool append made the
        events durable): when the arenas have nothing to read (see _wait), so
        neither a shot's hit nor the next shot of a salvo waits for it."""
        journal = self._journal
        mark, self._mark = self._mark, 0
        if self._records and journal is not None:
            mark = journal.record_many(self._records)  # StoreFailure: nothing goes out
        self._records.clear()
        publish = self.out.publish
        infos = [publish(e.topic, e.payload, qos=1, retain=e.retain) for e in self._outbox]
        self._outbox.clear()
        if mark and journal is not None:
            self._unacked.append((mark, infos))
        for mid, qos in self._acks:
            self.client.ack(mid, qos)
        self._acks.clear()
        if journal is not None and journal.pending >= SETTLE_MAX:
            journal.settle()

    def _note_published(self) -> None:
        """Tell the journal which batches' results the broker has: a restart
        publishes again only what came after (see make_arenas)."""
        unacked, journal = self._unacked, self._journal
        last = 0
        while unacked and all(map(_acknowledged, unacked[0][1])):
            last = unacked.popleft()[0]
        if last and journal is not None:
            journal.mark_published(self.arena.topics.prefix, last)

    def _check_lease(self, payload: bytes) -> None:
        """A lease on this arena. Once this referee's own came back from the
        broker, another one after it means the arena was taken over (by a
        referee started while this one was cut off, or at the same moment):
        the last claim wins, this one stops, quietly. (What the broker held
        before this referee's claim is an earlier holder's, approved by the
        survey at start-up.)"""
        lease = self.arena.lease
        if lease is None or not payload:
            return
        if payload.decode("utf-8", "replace") == lease:
            self._lease_echoed = True
            return
        if not self._lease_echoed:
            return
        log.error("[%s] another referee took this arena over (lease %s); stopping", self.name, payload[:200])
        self._high.appendleft(
            Fatal(Stop.ARENA_TAKEN, f"arena {self.name}: another referee took it over (its lease: {payload[:200]!r})")
        )

    def _report_budget(self, topic: str) -> bool:
        """Take a token for one error report to ``topic``, if its bucket has
        one. A bucket per error topic: garbage from nobody fills only
        /game/errors's, a team's own flood only its own, and a team's reports
        about its own messages still go out while others flood."""
        now = self._clock()
        buckets = self._report_buckets
        tokens, refilled = buckets.pop(topic, (REPORTS_PER_S, now))  # (re-inserted: most recent last)
        tokens = min(REPORTS_PER_S, tokens + (now - refilled) * REPORTS_PER_S)
        allowed = tokens >= 1
        buckets[topic] = (tokens - 1 if allowed else tokens, now)
        if len(buckets) > REPORT_BUCKETS:
            del buckets[next(iter(buckets))]  # the longest unused (full again by now)
        return allowed

    def _key_callback(self, job: DeriveKey) -> Callable[[Future[bytes]], None]:
        # Runs on a pool thread: only hand the result back to the arena thread.
        return lambda future: self._put(_KeyDone(job, future))

    def _shutdown(self, *, say_down: bool = True) -> None:
        if self._journal is not None:
            with contextlib.suppress(Exception):  # a journal that failed: its spool keeps the events
                self._journal.settle()
        if say_down and self.out.is_connected():
            # QoS 1 in order: once "down" is acknowledged, so is all before it.
            info = self.out.publish(self.arena.topics.server, "down", qos=1, retain=True)
            with contextlib.suppress(RuntimeError, ValueError):
                self._pump(lambda: info.is_published() or self.out.socket() is None, 2)
        for client in (self.client, self.out):
            if client.socket() is not None:
                client.disconnect()  # written at once; paho then closes the socket
        self.connected.clear()
        self._wake_r.close()
        self._wake_w.close()


def emit(arena: str, line: Log) -> None:
    """Log one Log effect under the arena's name. Its args are formatted only
    when the level is on; a text without args is never used as a format
    (reasons and topics may hold ``%``)."""
    level = logging.INFO if line.accepted else logging.WARNING
    if line.args:
        log.log(level, "[%s] " + line.text, arena, *line.args)
    else:
        log.log(level, "[%s] %s", arena, line.text)


class FloodClock:
    """While garbage floods an arena, its running turn (or placement period)
    is stopped: every flooded second is given back to it (a journaled
    Extend), up to FLOOD_EXTENSION_MAX_S for one turn. The broker keeps only
    so many messages for the referee (max_queued_messages) and drops the rest,
    a team's shots among them, so a flood could otherwise make a team lose
    its turns; with the clock stopped, the shots its client sends again once
    the flood is over still count (the SDK does; see docs/protocol.md)."""

    def __init__(self, now: float) -> None:
        self.rejected = 0  # in the current second
        self._second = now
        self._flooded = False
        self._given: tuple[tuple[int, str, int], float] = ((0, "", 0), 0.0)

    def due(self, now: float) -> bool:
        """A second is over: was it flooded?"""
        if now - self._second < 1.0:
            return False
        self._flooded = self.rejected >= FLOOD_PER_S * (now - self._second)
        self._second, self.rejected = now, 0
        return self._flooded

    def extension(self, game: Game) -> float:
        """The time to give back for the flooded second, within the cap."""
        if game.next_deadline() is None:
            return 0.0
        key = (game.game_no, game.phase.value, game.turn)
        given = self._given[1] if self._given[0] == key else 0.0
        extra = min(1.0, FLOOD_EXTENSION_MAX_S - given)
        if extra <= 0:
            return 0.0
        self._given = (key, given + extra)
        return extra


class RejectionLog:
    """Rejections (and routine lines about messages that changed nothing)
    are logged one line each up to REJECT_LINES per REJECT_WINDOW_S; beyond
    that (a flood) they are counted by code and summed up in one line per
    window, so a flood cannot fill the disk with log lines or spend the
    referee's time writing them."""

    def __init__(self, arena: str, clock: Callable[[], float]) -> None:
        self.arena = arena
        self._clock = clock
        self._window_end = 0.0
        self._lines = 0
        self.suppressed: collections.Counter[str] = collections.Counter()

    def emit(self, line: Log) -> None:
        if line.code is None:  # what changed the game: always
            emit(self.arena, line)
            return
        self.roll(self._clock())
        if self._lines < REJECT_LINES:
            self._lines += 1
            emit(self.arena, line)
        else:
            self.suppressed[line.code or "other"] += 1

    def roll(self, now: float) -> None:
        """Start a new window when the current one is over, summing up what
        the old one did not log line by line."""
        if now < self._window_end:
            return
        if self.suppressed:
            total = sum(self.suppressed.values())
            by_code = ", ".join(f"{code} {n}" for code, n in self.suppressed.most_common())
            log.warning(
                "[%s] %d more rejected or repeated messages in %g s not logged one by one (%s)",
                self.arena,
                total,
                REJECT_WINDOW_S,
                by_code,
            )
            self.suppressed.clear()
        self._window_end = now + REJECT_WINDOW_S
        self._lines = 0


class _ArenaThread:
    """The one thread that drives a referee's arenas: ``select`` on all of
    their sockets, then each arena's I/O, batch and timers in turn. Arena
    threads of their own would hand the GIL to one another at every socket
    call: four busy arenas on four threads cost ~220 us of referee CPU per
    shot, on one thread ~160 (docs/performance.md). An arena that crashes
    stops alone (its ``fatal`` says why); the others go on."""

    def __init__(self, runners: list[ArenaRunner]) -> None:
        self.runners = runners
        self.thread = threading.Thread(target=self._run, name="arenas", daemon=True)

    def start(self) -> None:
        for runner in self.runners:
            runner._thread = self.thread
            runner._begin()
        self.thread.start()

    def _run(self) -> None:
        active = list(self.runners)
        journals = [j for j in {r._journal for r in self.runners} if j is not None]
        check_at = 0.0
        try:
            while active:
                mono = time.monotonic()
                rlist: list[Any] = []
                wlist: list[Any] = []
                timeout = MISC_EVERY_S
                for runner in list(active):
                    try:
                        timeout = min(timeout, runner._prepare(mono, rlist, wlist))
                    except Exception as exc:
                        self._drop(active, runner, exc)
                if not active:
                    break
                try:
                    if mono >= check_at:  # the state file still there, still the same file?
                        check_at = mono + INTACT_EVERY_S
                        for journal in journals:
                            journal.check_intact()
                    readable, writable = _wait(active, rlist, wlist, timeout)
                    ready, can_write = set(readable), set(writable)
                    for runner in list(active):
                        if not runner._advance(ready, can_write):
                            self._drop(active, runner)
                except StoreFailure as exc:
                    # The journal cannot take what follows (disk full, I/O error,
                    # the file gone): no arena can go on; nothing more is published.
                    log.error("%s", exc)
                    for runner in list(active):
                        runner.stop_with(Fatal(Stop.STATE, str(exc)))
                        active.remove(runner)
                        runner._stopped.set()
                    break
        finally:
            for runner in active:  # only on a BaseException
                runner._stopped.set()

    @staticmethod
    def _drop(active: list[ArenaRunner], runner: ArenaRunner, crash: Exception | None = None) -> None:
        if crash is not None:
            runner._crashed(crash)
        active.remove(runner)
        runner._stopped.set()


def _wait(
    runners: list[ArenaRunner], rlist: list[Any], wlist: list[Any], timeout: float
) -> tuple[list[Any], list[Any]]:
    """``select``, and when nothing is to be read, the SQLite commit of what
    the journal's spool already holds (off the critical path of every message)."""
    unsettled = [j for j in {r._journal for r in runners} if j is not None and j.pending]
    readable, writable = _select(rlist, wlist, 0.0 if unsettled else timeout)
    if unsettled and not readable:
        for journal in unsettled:
            journal.settle()
        if timeout > 0 and not writable:
            readable, writable = _select(rlist, wlist, timeout)
    return readable, writable


def _select(rlist: list[Any], wlist: list[Any], timeout: float) -> tuple[list[Any], list[Any]]:
    try:
        readable, writable, _ = select.select(rlist, wlist, [], timeout)
    except (OSError, ValueError):  # a socket closed between socket() and select
        return [], []
    return readable, writable


def _pending(sock: Any) -> bool:
    """Bytes a TLS socket has already decrypted, which select cannot see."""
    pending = getattr(sock, "pending", None)
    return pending is not None and pending() > 0


def _team_key(registry: Registry | None, job: DeriveKey) -> bytes:
    """On a pool thread: check a registered team's secret when the registry
    could not at once (an old entry: argon2id), then derive its team key
    (argon2id; the spec's KDF)."""
    if registry is not None and job.verify:
        registry.verify(job.name, job.secret)
    return crypto.derive_team_key(job.name, job.secret)


class Referee:
    """Several arenas, one key-derivation pool, one journal."""

    def __init__(
        self,
        arenas: list[Arena],
        broker: Broker,
        *,
        client_id: str = "salvo-referee",
        journal: Journal | None = None,
        workers: int | None = None,
        session_expiry_s: int = 3600,
        registry: Registry | None = None,
    ) -> None:
        if registry is not None:
            for arena in arenas:
                # An arena with its own rule (a tournament's roster) keeps it:
                # that rule consults the registry itself.
                if arena.admit is None:
                    arena.admit = registry.admit
        # argon2id is CPU-bound and takes 64 MiB while it runs: one worker per
        # core is as fast as more, and bounds that memory (6 workers: 400 MB).
        self.pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="argon2")
        self.journal = journal
        self._fatal: Fatal | None = None
        self.runners = [
            ArenaRunner(
                arena,
                broker,
                client_id=f"{client_id}-{arena.topics.prefix}" if arena.topics.prefix else client_id,
                pool=self.pool,
                journal=journal,
                session_expiry_s=session_expiry_s,
                registry=registry,
            )
            for arena in arenas
        ]

    def start(self) -> None:
        _ArenaThread(self.runners).start()

    def wait_connected(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        return all(r.connected.wait(max(0.0, end - time.monotonic())) for r in self.runners)

    def close_lobby(self, prefix: str, reason: str) -> bool:
        """Send everybody in arena ``prefix``'s lobby away (see ArenaRunner)."""
        runner = next(r for r in self.runners if r.arena.topics.prefix == prefix)
        return runner.close_lobby(reason)

    def stop(self) -> None:
        for runner in self.runners:
            runner.request_stop()
        for runner in self.runners:
            runner.join(5.0)
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.journal is not None and self.fatal is None:
            # A clean stop over a state file emptied or replaced since the last
            # look must not exit 0: the next start could not find the game.
            try:
                self.journal.check_intact()
            except StoreFailure as exc:
                log.error("%s", exc)
                self._fatal = Fatal(Stop.STATE, str(exc))

    @property
    def fatal(self) -> Fatal | None:
        return self._fatal or next((r.fatal for r in self.runners if r.fatal), None)

    def any_stopped(self) -> bool:
        return any(not r.alive for r in self.runners)


def make_arenas(
    prefixes: list[str],
    config: Config,
    seed: int | str | None,
    referee_key: PrivateKey,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
    *,
    sealed_joins_only: bool = False,
    unbound_fire: bool = False,
) -> list[Arena]:
    """One arena per prefix, all sharing the referee key pair. Arena ``p``'s
    games are seeded with ``(seed, p)`` so arenas do not mirror each other;
    each has a random key its game ids derive from.

    With a store, a known arena resumes: its stored seed and id key, then
    every event of its current game replayed through the engine; a new arena
    is added with a random seed unless one is given."""
    arenas = []
    for p in prefixes:
        known = store.arena(p) if store is not None else None
        if known is None:
            base = seed if seed is not None else int.from_bytes(os.urandom(8), "big")
            id_key = os.urandom(32)
            if store is not None:
                store.add_arena(p, _arena_seed(base, p), config, id_key)
            game = Game(config, Topics(p), _arena_seed(base, p), id_key=id_key)
            arenas.append(Arena(game, referee_key, sealed_joins_only=sealed_joins_only, unbound_fire=unbound_fire))
            continue
        assert store is not None
        game, backlog, backlog_to = _resume(store, p, known)
        arena = Arena(game, referee_key, sealed_joins_only=sealed_joins_only, unbound_fire=unbound_fire)
        arena.backlog, arena.backlog_to = backlog, backlog_to
        if seed is not None and _arena_seed(seed, p) != known[0]:
            log.warning("[%s] keeps its stored seed; --seed applies to new arenas only", p or "(default)")
        if arena.game.config != config:
            # Journaled, so a later replay switches settings at this very point.
            for effect in arena.configure(config, clock()):
                if isinstance(effect, Record):
                    store.record(p, effect.game_no, effect.event)
        arenas.append(arena)
    return arenas


def _arena_seed(seed: int | str, prefix: str) -> str:
    return f"{seed}/{prefix}" if prefix else str(seed)


def _resume(store: Store, prefix: str, known: tuple[str, Config, bytes]) -> tuple[Game, list[Publish], int]:
    """The arena's game as its journal left it; and what its events entitled
    the teams to hear that the broker never acknowledged (the referee died
    between journaling and publishing): those publishes in order, and the
    journal id they reach."""
    seed, created_with, id_key = known
    game_no, events = store.current_game_ids(prefix)
    config = store.config_before(prefix, game_no) or created_with
    published = store.published(prefix)
    # Only this game's nonces matter (its id binds every signature to it):
    # they come back with its events.
    game = Game(config, Topics(prefix), seed, game_no=game_no, id_key=id_key)
    backlog: list[Publish] = []
    for event_id, journaled in events:
        event = journaled
        if type(event) is Fire and not event.shooter:
            # A v1 journal: its shots were the current player's.
            event = event._replace(shooter=game.current or "")
        result = game.handle(event)
        if isinstance(result, Rejected):  # the journal and the engine disagree: say so, go on
            log.error("[%s] journal event %s no longer applies: %s", prefix, event, result.error.reason)
        elif event_id > published:
            backlog += result.effects
    backlog = _latest_retained(backlog)
    log.info(
        "[%s] resumed game %d from %s: %d events replayed, state %s, turn %d; %d results to publish again",
        prefix or "(default)",
        game.game_no,
        store.path,
        len(events),
        game.phase.value,
        game.turn,
        len(backlog),
    )
    return game, backlog, events[-1][0] if events and events[-1][0] > published else 0


def _acknowledged(info: paho.MQTTMessageInfo) -> bool:
    """The broker has this message. A QoS 1 message published while the
    connection was down keeps ``rc`` = ``MQTT_ERR_NO_CONN`` for good, and
    ``is_published()`` raises for it, although paho sends it on reconnect and
    marks it published when the PUBACK comes: read that mark itself."""
    if info.rc == paho.MQTT_ERR_NO_CONN:
        return info._published
    try:
        return info.is_published()
    except (RuntimeError, ValueError):  # never queued: it will never be acknowledged
        return False


def _latest_retained(backlog: list[Publish]) -> list[Publish]:
    """The backlog with only the last value of each retained topic: publishing
    the values in between again would send a retained topic back in time
    (a lobby list shrinking) before it reaches its value again."""
    last = {p.topic: i for i, p in enumerate(backlog) if p.retain}
    return [p for i, p in enumerate(backlog) if not p.retain or last[p.topic] == i]
