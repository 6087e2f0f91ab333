"""One arena on its two MQTT connections, driven by a :class:`~salvo.net.loop.Loop`
it shares with the other arenas.

paho's callbacks (inside ``loop_read``) only hand messages to the arena's
inbox; once the loop's reads are over the arena applies what was handed
over as one batch (see :mod:`salvo.referee.batch`): journaled, then published,
then acknowledged (manual QoS 1 acks: a message is acknowledged only once
its outcome is durable, so a crash makes the broker redeliver it). The
runner composes that batch (``self.batch``, over an
:class:`~salvo.referee.transport.MqttTransport`) and the dispatcher that
fills it (``self.dispatcher``); it writes none of their state.

Everything an arena waits for is a state, never a blocking call, so that no
arena holds up another: *connecting*, *sweeping* (stale retained topics are
read until a marker comes back; the inbox waits), *up*, *stopping* ('down'
published and its PUBACK awaited, then DISCONNECT written), *stopped*.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Final

import paho.mqtt.client as paho
from paho.mqtt.reasoncodes import ReasonCode

from salvo.arena.arena import Arena, DeriveKey, Effect
from salvo.arena.statefile import StoreFailure
from salvo.net.link import REFUSED, Link, Takeovers
from salvo.net.loop import Handle, Loop, steady_time
from salvo.net.mqtt import Broker, Client, connect_async
from salvo.referee.admission import Registry, team_key
from salvo.referee.batch import (
    Batch,
    Connected,
    Control,
    Dispatcher,
    Fatal,
    Journal,
    KeyDone,
    LeaseSeen,
    Message,
    OutConnected,
    ProbeSeen,
    Stop,
)
from salvo.referee.connections import (
    CONNECTION,
    PUBLISHING,
    discard_stale_session,
    judge_takeover,
    open_clients,
    subscribe_arena,
)
from salvo.referee.flood import LagClock
from salvo.referee.ownership import Fence
from salvo.referee.presence import Farewell, Sweep
from salvo.referee.transport import MqttTransport

log = logging.getLogger("salvo.referee")

#: An overdue timer waits this long for queued messages (sent in time, but
#: delivered late, e.g. the backlog after a restart) and after a (re)connect;
#: a timer held back looks again after TIMER_RECHECK_S.
TIMER_GRACE_S: Final = 1.0
TIMER_RECHECK_S: Final = 0.1
#: A cut from the broker longer than this is given back to the running turn.
EXTEND_AFTER_S: Final = 0.5
#: Stopping: how long 'down' may wait for its PUBACK (then ``out`` is dropped
#: without DISCONNECT and the broker's last will says 'down'), and how long
#: DISCONNECT may take to be written. A signal ends the process within 2 s.
DOWN_WAIT_S: Final = 0.8
CLOSE_WAIT_S: Final = 0.2
#: How often the lag clock sends its probe and the rejection log's window is looked at.
HOUSEKEEPING_S: Final = 0.5


class _State(enum.Enum):
    CONNECTING = "connecting"
    SWEEPING = "sweeping"
    UP = "up"
    STOPPING = "stopping"
    STOPPED = "stopped"


_ENDING: Final = (_State.STOPPING, _State.STOPPED)


class ArenaRunner:
    """One arena on its MQTT connections, driven by a loop it shares with
    other arenas (its own when none is given: tests drive it by hand)."""

    def __init__(
        self,
        arena: Arena,
        broker: Broker,
        *,
        client_id: str,
        pool: Executor,
        journal: Journal | None = None,
        session_expiry_s: int = 120,
        discard_session: bool = False,
        clock: Callable[[], float] = steady_time,
        registry: Registry | None = None,
        loop: Loop | None = None,
        on_stopped: Callable[[ArenaRunner], None] | None = None,
    ) -> None:
        self.arena = arena
        self.name = arena.topics.prefix or "(default)"
        self.loop = loop if loop is not None else Loop()
        self._pool = pool
        self._journal = journal
        self._clock = clock
        self._registry = registry
        self._lag = LagClock()
        self._broker = broker
        self._expiry = session_expiry_s
        #: The session the broker kept is stale (the referee was away longer
        #: than its resume window): the first connection starts a clean one,
        #: so nothing queued for the old one is applied (see _discarded).
        self._discarding = discard_session
        self._on_stopped = on_stopped
        self._state = _State.CONNECTING
        self._begun = False
        self._halting = False  # stop once the current batch is out
        self._work_due = False
        self._stopped = threading.Event()
        self.connected = threading.Event()
        self.fatal: Fatal | None = None
        self._connected_at = 0.0
        #: When the subscribing connection was lost (to give the time back to the turn).
        self._lost_at: float | None = None
        self._ever_connected = False
        # Loop timers: the arena's next deadline, housekeeping.
        self._timer: Handle | None = None
        self._timer_deadline: float | None = None
        self._chores: Handle | None = None
        t = arena.topics
        self._client_ids = {CONNECTION: client_id, PUBLISHING: f"{client_id}-out"}
        self._takeovers = Takeovers(self.name, self._client_ids, cluster=len(broker.endpoints) > 1)
        self.client, self.out = open_clients(broker, client_id, t)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.out.on_connect = self._on_out_connect
        self.out.on_disconnect = self._on_out_disconnect
        self._fence = Fence(arena, self.client)
        self._sub = self._link(self.client, CONNECTION, on_message=self._on_message, on_read=self._kick)
        self._pub = self._link(self.out, PUBLISHING, on_read=self._after_out_read)
        # ``out`` first: its last will guards everything ``client`` triggers.
        self._links = (self._pub, self._sub)
        self.batch = Batch(
            t.prefix,
            MqttTransport(self.out, self._pub, self.client),
            journal,
            when_idle=self.loop.call_when_idle,
            behind=self._lag.behind,
        )
        self.dispatcher = Dispatcher(
            arena,
            self.batch,
            clock=clock,
            lag=self._lag,
            derive=self._derive,
            is_up=self.connected.is_set,
            on_connected=self._sweep_after_connect,
            halt=self._halt,
        )
        self._sweep = Sweep(self.loop, t, self.client, name=self.name, on_over=self._kick, guard=self._guard)
        self._farewell = Farewell(
            self.loop,
            self._pub,
            self._links,
            name=self.name,
            wait_s=DOWN_WAIT_S,
            close_s=CLOSE_WAIT_S,
            on_done=self._finish,
            guard=self._guard,
        )
        self._work_cb = self._guard(self._work_once)
        self._timer_cb = self._guard(self._on_timer)
        self._chores_cb = self._guard(self._housekeeping)

    def _link(
        self,
        client: Client,
        role: str,
        *,
        on_read: Callable[[], None],
        on_message: Callable[[paho.Client, Any, paho.MQTTMessage], None] | None = None,
    ) -> Link:
        return Link(
            self.loop,
            client,
            role,
            name=self.name,
            broker=self._broker,
            on_message=on_message,
            on_read=on_read,
            on_closed=self._link_closed,
            guard=self._guard,
        )

    # -- paho callbacks: run inside loop_read; hand off only -----------------------------

    def _on_connect(self, client: paho.Client, _u: Any, flags: Any, rc: ReasonCode, _p: Any) -> None:
        if rc.is_failure:
            log.error("[%s] broker %s refused the connection: %s", self.name, self._broker.url, rc)
            if not self._ever_connected and rc.value in REFUSED:
                self._halt(Fatal(Stop.BROKER_REFUSED, f"broker refused the connection: {rc}"))
            return
        if self._discarding and not self._discarded(bool(flags.session_present)):
            return
        self._sub.up()
        self._fence.reset()  # (a check under way is the sweep's now)
        first, self._ever_connected = not self._ever_connected, True
        judge_takeover(
            self.loop, self._guard, self.name, self._takeovers.reconnected(CONNECTION, self.client.endpoint), self._pub
        )
        if first and self.arena.lease:
            # The claim first, before the sweep publishes anything: a referee
            # starting at the same moment sees it (or this one sees theirs,
            # before its sweep's marker) and the later claim alone goes on.
            self.out.publish(self.arena.topics.lease, self.arena.lease, qos=1, retain=True)
        subscribe_arena(self.client, self.arena.topics)
        self.dispatcher.put(Connected(bool(flags.session_present)))

    def _discarded(self, session_present: bool) -> bool:
        """A stale session is being discarded: True once it is (see discard_stale_session)."""
        if not discard_stale_session(self.client, session_present):
            return False
        self._discarding = False
        # The closes on the way were ours, not another client's taking over.
        self._takeovers = Takeovers(self.name, self._client_ids, cluster=len(self._broker.endpoints) > 1)
        log.info("[%s] started a new session: what the broker kept for the old one is dropped", self.name)
        return True

    def _on_out_connect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        if rc.is_failure:
            log.error("[%s] broker %s refused the publishing connection: %s", self.name, self._broker.url, rc)
            if rc.value in REFUSED:
                self._halt(Fatal(Stop.BROKER_REFUSED, f"broker refused the connection: {rc}"))
            return
        self._pub.up()
        # This connection's last will may have said "down" while it was away
        # (a cut, or another client taking its id over): say "up" again.
        judge_takeover(
            self.loop, self._guard, self.name, self._takeovers.reconnected(PUBLISHING, self.out.endpoint), self._sub
        )
        self.dispatcher.put(OutConnected(self.connected.is_set()))

    def _on_disconnect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        if self.connected.is_set() and self._lost_at is None:
            self._lost_at = self._clock()
        self.connected.clear()
        if self._state is _State.SWEEPING:  # a sweep starts over at the next connect
            self._sweep.cancel()
        if self._state not in _ENDING:
            self._state = _State.CONNECTING
        self._note_disconnect(rc, CONNECTION)

    def _on_out_disconnect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        self._note_disconnect(rc, PUBLISHING)
        if self._ever_connected and self._state not in _ENDING and self.arena.lease:
            # Fencing: this referee may have been away (a frozen process, a
            # cut-off machine) while another took the arena. Nothing it
            # publishes, not even paho's resends of what was in flight, goes
            # out again before the subscriber has seen the arena's lease and
            # it is still this one's: at the end of the next sweep, or when
            # this check's marker comes back (after the retained lease).
            self._pub.held = True
            if self.connected.is_set():
                self._fence.check()

    def _fenced(self) -> None:
        """The lease check's marker is back: every lease the broker holds or
        took meanwhile came before it."""
        if self._fence.rival():
            log.error("[%s] a newer referee holds this arena: stopping, publishing nothing", self.name)
            self._halt(Fatal(Stop.ARENA_TAKEN, f"arena {self.name}: another referee took it over meanwhile"))
        elif self._state is _State.UP:
            self._pub.release()

    def _note_disconnect(self, rc: ReasonCode, role: str) -> None:
        self._takeovers.dropped(role, rc, quiet=self._state in _ENDING)

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        try:
            topic = msg.topic
        except UnicodeDecodeError:  # a broker should not let this through
            topic = msg._topic.decode("utf-8", "replace")  # noqa: SLF001 (paho private, the raw bytes; guarded)
        if topic == self.arena.topics.lease:
            self._fence.saw(bytes(msg.payload))
            self.dispatcher.put(LeaseSeen(bytes(msg.payload)))
            return
        if topic == self.arena.topics.sweep and self._fence.returned(bytes(msg.payload)):
            self._fenced()
            return
        if topic == self.arena.topics.probe:
            self.dispatcher.put(ProbeSeen(bytes(msg.payload), msg.mid, msg.qos))
            return
        if self._sweep.take(topic, msg):
            return
        if msg.qos == 0:
            if self.arena.topics.parse_inbound(topic) is None:
                # Our own output, echoed by the sweep's subscription while it
                # is being taken down: not addressed to us.
                return
            self.dispatcher.put_qos0(Message(topic, bytes(msg.payload), msg.mid, msg.qos, msg.retain))
            return
        self.dispatcher.put(Message(topic, bytes(msg.payload), msg.mid, msg.qos, msg.retain))

    # -- lifecycle (other threads) -------------------------------------------------------

    def control_soon(self, action: Callable[[Arena, float], list[Effect]]) -> Future[bool]:
        """From any thread, the loop's too: apply an organiser's action (one
        of the Arena's controls) on the loop's thread, journaled and published
        like any event. The future answers True when it changed the game,
        False when it had nothing to do or was refused; never when the arena
        is not up or stops (the asker gives up: salvo.net.loop.answer)."""
        item = Control(action, Future())
        self.loop.call_soon_threadsafe(self._enqueue, item)
        return item.done

    def halt(self) -> None:
        """On the loop's thread: stop once the current batch is out."""
        self._halt(None)

    @property
    def alive(self) -> bool:
        return self._begun and not self._stopped.is_set()

    @property
    def stopped(self) -> bool:
        """It stopped (or its loop is gone). One not begun yet has not: a
        thousand arenas take the loop's thread a while to begin."""
        return self._stopped.is_set()

    # -- on the loop's thread ------------------------------------------------------------

    def begin(self) -> None:
        """Start connecting (``out`` first) and the housekeeping."""
        self._begun = True
        connect_async(self.out, self._broker)
        connect_async(self.client, self._broker, session_expiry_s=self._expiry)
        if self._discarding:
            self.client.next_session(clean=True)
        for link in self._links:
            link.start()
        self._chores = self.loop.call_later(HOUSEKEEPING_S, self._chores_cb)

    def _guard(self, callback: Callable[[], None]) -> Callable[[], None]:
        """The callback, crashing only this arena when it raises. A failing
        journal is every arena's: StoreFailure goes on to the loop's owner."""

        def guarded() -> None:
            try:
                callback()
            except StoreFailure:
                raise
            except Exception as exc:
                if self._state in _ENDING:  # failed while stopping: stop for good
                    log.exception("[%s] stopping failed", self.name, exc_info=exc)
                    self._finish()
                else:
                    self._crashed(exc)

        return guarded

    def _enqueue(self, item: object) -> None:
        self.dispatcher.put(item)
        self._kick()

    def _derive(self, job: DeriveKey) -> None:
        """A join's key, derived on the pool (argon2id, ~50 ms off the loop);
        its outcome comes back through the inbox."""
        future = self._pool.submit(team_key, self._registry, job)
        future.add_done_callback(lambda done: self.loop.call_soon_threadsafe(self._enqueue, KeyDone(job, done)))

    def _kick(self) -> None:
        """Work through the inbox once the current callback is done (once for
        all the reads of this pass)."""
        if not self._work_due and self._state not in _ENDING:
            self._work_due = True
            self.loop.call_soon(self._work_cb)

    def _work_once(self) -> None:
        self._work_due = False
        if self._state in _ENDING:
            return
        if self._state is _State.SWEEPING and self._sweep.over:
            self._end_sweep()
        if self._state is not _State.SWEEPING:  # (a sweep holds the inbox back)
            self._work()
        if self._halting:
            self._begin_stop()
            return
        if self._state is not _State.SWEEPING and self.dispatcher.waiting:
            self._lag.behind()
            self._kick()  # the rest after the other arenas' turn
        elif not self._sub.has_input():
            self._lag.idle()  # caught up: nothing waits for this referee, here or at the broker
        self._arm_timer()

    def _work(self) -> None:
        """Apply up to a batch of inbox items, then journal, publish and
        acknowledge them (see Dispatcher.work and Batch.flush)."""
        self.dispatcher.work(self._paused)

    def _paused(self) -> bool:
        """The inbox waits: stopping, or a sweep under way."""
        return self._halting or self._state is _State.SWEEPING

    def _halt(self, fatal: Fatal | None) -> None:
        """Stop once the current batch is out: asked to (None), or for ``fatal``."""
        if fatal is not None and self.fatal is None:
            self.fatal = fatal
        self._halting = True
        self._kick()

    def _send_probe(self, now: float) -> None:
        """The lag clock's probe through the broker, unless one is out."""
        if (token := self._lag.probe(now)) is not None:
            self.out.publish(self.arena.topics.probe, token, qos=1)

    def _housekeeping(self) -> None:
        now = self._clock()
        self.dispatcher.rejections.roll(now)
        if self._state is _State.UP:
            if self.arena.next_deadline() is not None:  # (only a deadline asks the lag clock:
                self._send_probe(now)  # 1000 empty lobbies made 2000 probes a second)
            else:
                self._lag.rest()
            self._lag.window(now)
        if self._state is _State.UP and (extension := self._lag.extension(self.arena.game, now)):
            self.dispatcher.apply(self.arena.extend(extension, now))
            self.dispatcher.flush()
            self._arm_timer()
        self._chores = self.loop.call_later(HOUSEKEEPING_S, self._chores_cb)

    def _after_out_read(self) -> None:
        self.batch.note_published()
        if self.dispatcher.urgent:  # (OutConnected)
            self._kick()
        if self._state is _State.STOPPING:
            self._farewell.read()

    # -- the start-up sweep --------------------------------------------------------------

    def _sweep_after_connect(self, session_present: bool) -> None:
        if not self.client.is_connected():
            return  # lost again meanwhile: the next connect sweeps
        host, port = self.client.endpoint
        log.info(
            "[%s] connected to %s:%d (session %s); publishing retained state",
            self.name,
            host,
            port,
            "resumed" if session_present else "new",
        )
        self._state = _State.SWEEPING
        self._sweep.start()

    def _end_sweep(self) -> None:
        """Clear what the sweep found stale, publish what the journal says the
        teams have not heard yet (a referee killed between journaling and
        publishing), then the state: the arena is up. Unless the broker showed
        a newer lease meanwhile (it came before the sweep's marker): then
        nothing at all, and this referee stops."""
        if self._fence.rival():
            log.error("[%s] a newer referee holds this arena: stopping, publishing nothing", self.name)
            self._halt(Fatal(Stop.ARENA_TAKEN, f"arena {self.name}: another referee took it over meanwhile"))
            return
        self._pub.release()
        t = self.arena.topics
        self._sweep.finish(self.out, keep={*self.arena.game.retained, t.server, t.pubkey, t.version})
        backlog, self.arena.backlog = self.arena.backlog, []
        self.batch.republish(backlog, self.arena.backlog_to)
        self.dispatcher.apply(list(self.arena.presence()))
        self.dispatcher.flush()
        self._connected_at = self._clock()
        self._lag.reset()
        self._state = _State.UP
        self._send_probe(self._connected_at)  # at once: trusted before any game of this connection can start
        self.connected.set()
        if self._lost_at is not None:
            cut = self._connected_at - self._lost_at
            self._lost_at = None
            if cut > EXTEND_AFTER_S:
                self.dispatcher.apply(self.arena.extend(cut, self._connected_at))
                self.dispatcher.flush()

    # -- the arena's timers --------------------------------------------------------------

    def _arm_timer(self, *, recheck: bool = False) -> None:
        """A loop timer at the arena's next deadline (kept while it is the same)."""
        deadline = self.arena.next_deadline()
        if not recheck and self._timer is not None and deadline == self._timer_deadline:
            return
        self._cancel("_timer")
        self._timer_deadline = deadline
        if deadline is None or self._state in _ENDING:
            return
        wait = deadline - self._clock()
        if wait <= 0:
            wait = TIMER_RECHECK_S if recheck else 0.0
        self._timer = self.loop.call_later(wait, self._timer_cb)

    def _on_timer(self) -> None:
        self._timer = None
        if self._state is _State.UP and self._sub.has_input():
            # What arrived while the loop could not look (a busy pass, the
            # process frozen past the deadline) is applied before the clock.
            self._sub.read_now()
            self._work()
        deadline, now = self.arena.next_deadline(), self._clock()
        if self._timer_due(deadline, now):
            self.dispatcher.apply(self.arena.on_tick(now))
            self.dispatcher.flush()
        # held back, or the same deadline again: look again shortly
        self._arm_timer(recheck=self.arena.next_deadline() == deadline)

    def _timer_due(self, deadline: float | None, now: float) -> bool:
        """Timers wait while the broker is away (nobody could act) and briefly
        after it returns and while messages are queued, in the inbox or still
        in the socket (a process frozen past the deadline, a busy loop): those
        were sent in time and are applied first."""
        if deadline is None or now < deadline:
            return False
        if not self.connected.is_set() or now < self._connected_at + TIMER_GRACE_S:
            return False
        if self._lag.holding(now):  # the teams' messages are late on their way: they come first
            return False
        return not (self.dispatcher.waiting or self._sub.has_input()) or now >= deadline + TIMER_GRACE_S

    # -- stopping ------------------------------------------------------------------------

    def _crashed(self, exc: Exception) -> None:
        """A bug: say so loudly, stop this arena."""
        log.exception("[%s] arena crashed", self.name, exc_info=exc)
        self.stop_with(Fatal(Stop.INTERNAL, f"internal error: {exc!r}"))

    def stop_with(self, fatal: Fatal) -> None:
        """On the loop's thread: stop this arena now for ``fatal``, dropping
        the batch under way (nothing of it was journaled). Another referee
        now holding the arena is not told 'down' (that would be a lie about
        *its* presence)."""
        if self.fatal is None:
            self.fatal = fatal
        self._begin_stop()

    def _begin_stop(self) -> None:
        if self._state in _ENDING:
            return
        self._state = _State.STOPPING
        self._sweep.cancel()
        for name in ("_timer", "_chores"):
            self._cancel(name)
        self.dispatcher.drop()
        if self._journal is not None:
            with contextlib.suppress(Exception):  # a journal that failed: its spool keeps the events
                self._journal.settle()
        say_down = self.fatal is None or self.fatal.kind is not Stop.ARENA_TAKEN
        self._farewell.start((self.arena.topics.server, "down") if say_down else None)

    def _link_closed(self) -> None:
        if self._state is _State.STOPPING:
            self._farewell.closed()

    def _finish(self) -> None:
        if self._state is _State.STOPPED:
            return
        self._state = _State.STOPPED
        self._sweep.cancel()
        for name in ("_timer", "_chores"):
            self._cancel(name)
        for link in self._links:
            link.abort()  # (what is still open, after a failure)
        self.connected.clear()
        self._stopped.set()
        if self._on_stopped is not None:
            self._on_stopped(self)

    def abandon(self) -> None:
        """The loop is gone (its thread ended): this arena is stopped."""
        self._state = _State.STOPPED
        self.connected.clear()
        self._stopped.set()

    def _cancel(self, name: str) -> None:
        handle: Handle | None = getattr(self, name)
        if handle is not None:
            handle.cancel()
            setattr(self, name, None)
