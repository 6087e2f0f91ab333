"""What one arena does with what it received, in two small objects the
runner composes: a :class:`Dispatcher` turns inbox items into engine
effects, and a :class:`Batch` journals them, then publishes, then
acknowledges (see :meth:`Batch.flush`), through a :class:`Transport`;
the batch's log lines come after (:meth:`Dispatcher.flush`).
The connections and the arena's states around them are
:mod:`salvo.referee.runner`'s; the MQTT transport is
:mod:`salvo.referee.transport`'s. Neither object knows MQTT: tests drive
them through an in-memory transport (tests/transport_fake.py)."""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Final, Protocol

from salvo.arena.arena import Arena, DeriveKey, Effect, Log, Record
from salvo.game.events import Event
from salvo.referee.flood import BROKER_INFLIGHT, REPORTS_PER_S, LagClock, RejectionLog, ReportBudget
from salvo.referee.ownership import Lease
from salvo.spec.errors import Code, Illegal, Rejection
from salvo.spec.payloads import Publish

log = logging.getLogger("salvo.referee")

#: QoS 0 messages waiting in an arena's inbox beyond this are dropped
#: (at-most-once anyway). Teams send QoS 1, which always waits its turn.
QOS0_BACKLOG: Final = 2_000
#: At most this many inbox items are handled (and journaled) as one batch.
BATCH_MAX: Final = 64
#: Journaled events wait for their SQLite commit until the loop has nothing
#: to do, or until there are this many (see Batch.flush).
SETTLE_MAX: Final = 256


class Journal(Protocol):
    """Where accepted events are persisted (see :mod:`salvo.arena.journal`)."""

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


# -- what the inbox holds, besides messages ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    payload: bytes
    mid: int
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class KeyDone:
    job: DeriveKey
    future: Future[bytes]


@dataclass(frozen=True, slots=True)
class Connected:
    session_present: bool


@dataclass(frozen=True, slots=True)
class OutConnected:
    #: presence had been announced when it (re)connected: a reconnect, which
    #: the last will may have answered with 'down'
    was_up: bool


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    lease: bytes


@dataclass(frozen=True, slots=True)
class ProbeSeen:
    """The referee's own probe back from the broker (LagClock), in turn
    with the teams' messages; acknowledged like them."""

    token: bytes
    mid: int
    qos: int


@dataclass(frozen=True, slots=True)
class Control:
    """An organiser's action on the arena's game from another thread (close
    the lobby, pause, resume, extra time, abort): applied on the loop's
    thread between batches, journaled and published like any event."""

    action: Callable[[Arena, float], list[Effect]]
    #: True when it changed the game (it was journaled), False when it had
    #: nothing to do or was refused (a lobby closed once a game started)
    done: Future[bool]


# -- what the batch needs from the outside -----------------------------------------------


class Receipt(Protocol):
    """One published message, as the transport tracks it."""

    def acknowledged(self) -> bool:
        """The broker has it (MQTT: its PUBACK came)."""


class Transport(Protocol):
    """All a batch needs of the broker (:class:`salvo.referee.transport.MqttTransport`;
    in tests, an in-memory one). Every publish is QoS 1."""

    def publish(self, topic: str, payload: str | bytes, retain: bool) -> Receipt:
        """Queue a message for the broker; its receipt says when the broker has it."""

    def write(self) -> None:
        """Put what was published on the wire now (before the acks that follow)."""

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge an inbound message: the broker will not send it again."""


class Batch:
    """One arena's journal -> publish -> acknowledge: the promise of
    docs/reliability.md section 1, and nothing else. Effects and acks are
    collected while the inbox is worked through, then :meth:`flush` spools
    the events, hands the publishes to the transport, writes them, and only
    then acknowledges the messages that caused them. :meth:`note_published`
    moves the journal's published mark as PUBACKs come in, in order."""

    def __init__(
        self,
        prefix: str,
        transport: Transport,
        journal: Journal | None,
        *,
        when_idle: Callable[[Callable[[], None]], object],
        behind: Callable[[], None] = lambda: None,
    ) -> None:
        self._prefix = prefix
        self._transport = transport
        self._journal = journal
        #: the loop's call_when_idle: the SQLite commit waits for it
        self._when_idle = when_idle
        #: told when a batch acknowledges a whole in-flight window of the broker's
        self._behind = behind
        # The batch being built.
        self._records: list[tuple[str, int, Event]] = []
        self._outbox: list[Publish] = []
        self._acks: list[tuple[int, int]] = []
        self._mark = 0  # the journal id the batch being built completes, without records of its own
        #: Acknowledgements held back (a join whose key derivation is under
        #: way), by key: added to a batch by release().
        self._held: dict[int, list[tuple[int, int]]] = {}
        #: Batches whose publishes await the broker's PUBACK, with the journal
        #: id they complete; then the journal marks them published.
        self._unacked: collections.deque[tuple[int, list[Receipt]]] = collections.deque()
        #: The journal id a restart's backlog ends at, until the broker has it all (see note_published).
        self._backlog_end = 0

    # -- building a batch ----------------------------------------------------------------

    def record(self, game_no: int, event: Event) -> None:
        self._records.append((self._prefix, game_no, event))

    def publish(self, publish: Publish) -> None:
        self._outbox.append(publish)

    def ack(self, mid: int, qos: int) -> None:
        self._acks.append((mid, qos))

    def hold(self, key: int) -> bool:
        """Hold acknowledgements under ``key`` (see ack_held); False when
        they are held already."""
        if key in self._held:
            return False
        self._held[key] = []
        return True

    def ack_held(self, key: int, mid: int, qos: int) -> None:
        """Acknowledge this message with the batch that releases ``key``."""
        self._held[key].append((mid, qos))

    def release(self, key: int) -> None:
        """The held acknowledgements go with this batch."""
        self._acks += self._held.pop(key, [])

    def republish(self, backlog: list[Publish], upto: int) -> None:
        """After a restart: what the journal's events up to ``upto`` entitled
        the teams to hear and the broker never acknowledged, first in this
        batch; marked published once the broker has it all."""
        self._outbox += backlog
        self._mark = upto
        self._backlog_end = upto if backlog else 0

    def drop(self) -> None:
        """Stopping: forget the batch under way (nothing of it was journaled)."""
        self._records.clear()
        self._outbox.clear()
        self._acks.clear()

    # -- sending it ----------------------------------------------------------------------

    def flush(self) -> None:
        """Journal the batch's events, then publish its effects, then ack its
        messages: nothing is announced or acknowledged before it is durable.
        The journal's SQLite commit comes later (its spool append made the
        events durable): when the loop has nothing to do, so neither a shot's
        hit nor the next shot of a salvo waits for it."""
        journal = self._journal
        mark, self._mark = self._mark, 0
        if self._records and journal is not None:
            mark = journal.record_many(self._records)  # StoreFailure: nothing goes out
        self._records.clear()
        publish = self._transport.publish
        receipts = [publish(e.topic, e.payload, e.retain) for e in self._outbox]
        self._outbox.clear()
        if mark and journal is not None:
            self._unacked.append((mark, receipts))
        self._transport.write()  # the results on the wire before the acks
        acks = self._acks
        if len(acks) >= BROKER_INFLIGHT:
            # The broker sent as many as it may before our acks: it had more
            # waiting for us, queued at its end (and, full, dropped).
            self._behind()
        ack = self._transport.ack
        for mid, qos in acks:
            ack(mid, qos)
        acks.clear()
        if journal is not None and journal.pending:
            if journal.pending >= SETTLE_MAX:
                journal.settle()
            else:
                self._when_idle(journal.settle)

    def note_published(self) -> None:
        """PUBACKs came in: tell the journal which batches' results the
        broker has, in order (a restart publishes again only what came
        after; see salvo.arena.resume)."""
        unacked, journal = self._unacked, self._journal
        last = 0
        while unacked and all(r.acknowledged() for r in unacked[0][1]):
            last = unacked.popleft()[0]
        if last and journal is not None:
            journal.mark_published(self._prefix, last)
            if self._backlog_end and last >= self._backlog_end:
                # A mark is written with the next settle, which may be the next
                # join minutes later; killed meanwhile, the referee would publish
                # the backlog again, and a backlog can end a game: its last hits
                # would then go out after the new lobby. Written now.
                self._backlog_end = 0
                self._when_idle(journal.settle)


class Dispatcher:
    """One arena's inbox, and what it does with an item: the engine's
    effects go into the :class:`Batch`; a join's acknowledgement is held
    until its key derivation's outcome is in a batch. The runner fills the
    inbox and supplies what an item may start (``derive`` a key; a
    ``Connected`` item's sweep; a ``halt``) and whether the arena is up."""

    def __init__(
        self,
        arena: Arena,
        batch: Batch,
        *,
        clock: Callable[[], float],
        lag: LagClock,
        derive: Callable[[DeriveKey], None],
        is_up: Callable[[], bool] = lambda: True,
        on_connected: Callable[[bool], None] = lambda _session_present: None,
        halt: Callable[[Fatal], None] = lambda _fatal: None,
    ) -> None:
        self.arena = arena
        self.batch = batch
        self.name = arena.topics.prefix or "(default)"
        self._clock = clock
        self._lag = lag
        self._derive = derive
        self._is_up = is_up
        self._on_connected = on_connected
        self._halt = halt
        self.dropped_reports = 0
        self.rejections = RejectionLog(self.name, clock)
        self._reports = ReportBudget(clock)
        self.cleared_retained = 0
        self.poisoned = 0  # messages that met a bug (see dispatch)
        # The inbox, only touched on the loop's thread: control items and
        # QoS >= 1 messages first, in order, then QoS 0 messages, so a QoS 0
        # flood can neither delay the teams nor grow without bound.
        self._high: collections.deque[object] = collections.deque()
        self._low: collections.deque[Message] = collections.deque()
        self.dropped = 0  # QoS 0 messages dropped, the inbox holding QOS0_BACKLOG of them
        #: This referee's lease came back from the broker: from then on
        #: another lease means the arena was taken over.
        self._lease_echoed = False
        #: The batch's log lines, said once its results are out (see flush):
        #: at INFO, a line per accepted shot would delay its hit.
        self._lines: list[Log] = []

    # -- the inbox ----------------------------------------------------------------------

    def put(self, item: object) -> None:
        """Into the inbox, in turn: a control item or a QoS >= 1 message."""
        self._high.append(item)

    def put_qos0(self, item: Message) -> None:
        """A QoS 0 message: after all the others, and dropped beyond QOS0_BACKLOG."""
        if len(self._low) >= QOS0_BACKLOG:
            self.dropped += 1
        else:
            self._low.append(item)

    @property
    def waiting(self) -> bool:
        return bool(self._high or self._low)

    @property
    def urgent(self) -> bool:
        """Items other than QoS 0 messages wait."""
        return bool(self._high)

    def work(self, paused: Callable[[], bool]) -> None:
        """Apply up to BATCH_MAX inbox items as one batch (fewer when
        ``paused()`` says so), then journal, publish and acknowledge it."""
        high, low = self._high, self._low
        for _ in range(BATCH_MAX):
            if paused():
                break
            if high:
                item: object = high.popleft()
            elif low:
                item = low.popleft()
            else:
                break
            self.dispatch(item)
        self.flush()

    def flush(self) -> None:
        """Journal, publish and acknowledge the batch (Batch.flush), then log
        its lines, in the order they were made: the hits are not held up
        by their own log lines. Said even when the flush fails."""
        try:
            self.batch.flush()
        finally:
            self._say()

    def drop(self) -> None:
        """Stopping: the batch under way is forgotten (Batch.drop), its lines are still said."""
        self.batch.drop()
        self._say()

    def _say(self) -> None:
        lines, self._lines = self._lines, []
        for line in lines:
            self.rejections.emit(line)

    # -- one item ------------------------------------------------------------------------

    def dispatch(self, item: object) -> None:
        now = self._clock()
        batch = self.batch
        if isinstance(item, Message):
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
                self.apply(effects)
            if item.qos > 0:
                # A join waits for its key derivation: acknowledged only once its
                # outcome is journaled (or refused), so a referee killed meanwhile
                # gets the join again from the broker.
                if job is not None:
                    batch.ack_held(id(job), item.mid, item.qos)
                else:
                    batch.ack(item.mid, item.qos)
        elif isinstance(item, KeyDone):
            exc = item.future.exception()
            if exc is None:
                self.apply(self.arena.on_key(item.job, item.future.result(), now))
            else:
                if not isinstance(exc, Rejection):
                    log.error("[%s] key derivation for %s failed", self.name, item.job.name, exc_info=exc)
                    exc = Illegal(Code.BUSY, "busy: the join could not be checked; try again")
                self.apply(self.arena.on_key_failed(item.job, exc, now))
            batch.release(id(item.job))
        elif isinstance(item, LeaseSeen):
            self._check_lease(item.lease)
        elif isinstance(item, ProbeSeen):
            self._lag.returned(item.token, now)
            if item.qos > 0:
                batch.ack(item.mid, item.qos)
        elif isinstance(item, OutConnected):
            # A reconnect: its last will may have said "down" meanwhile. (Up
            # for the first time, the presence the sweep ends with says "up".)
            if item.was_up and self._is_up():
                batch.publish(Publish(self.arena.topics.server, "up", True))
        elif isinstance(item, Control):
            effects = item.action(self.arena, now)
            self.apply(effects)
            self.flush()
            item.done.set_result(any(isinstance(e, Record) for e in effects))
        elif isinstance(item, Connected):
            self._on_connected(item.session_present)

    def _clear_retained(self, item: Message) -> None:
        """A message on an inbound topic with the retain flag: stale (left
        from before this referee subscribed) or sent retained against the
        protocol. Either way it is no action; clear it, so the broker does
        not keep it and hand it out again at every resubscribe."""
        if not item.payload:
            return  # a clearing (ours, echoed back)
        self.cleared_retained += 1
        self.batch.publish(Publish(item.topic, "", True))
        self._lines.append(
            Log(
                False,
                "cleared a retained message on %s (inbound topics are not retained)",
                (item.topic[:120],),
                "retained",
            )
        )

    def apply(self, effects: list[Effect] | list[Publish]) -> None:
        """Put the engine's effects into the batch (error reports within
        their budget), start key derivations, keep the log lines for after
        the batch (see flush)."""
        batch = self.batch
        for effect in effects:
            if isinstance(effect, Publish):
                if effect.expendable and not self._reports.take(effect.topic):
                    self.dropped_reports += 1
                    if self.dropped_reports % 1000 == 1:
                        log.warning(
                            "[%s] over %.0f error reports/s: %d dropped so far",
                            self.name,
                            REPORTS_PER_S,
                            self.dropped_reports,
                        )
                    continue
                batch.publish(effect)
            elif isinstance(effect, Record):
                batch.record(effect.game_no, effect.event)
            elif isinstance(effect, DeriveKey):
                if batch.hold(id(effect)):  # (a repeat of a join gets the job under way)
                    self._derive(effect)
            elif isinstance(effect, Log):
                self._lines.append(effect)

    def _check_lease(self, payload: bytes) -> None:
        """A lease on this arena. A newer one than this referee's (a higher
        generation: claimed after it, by a referee started while this one was
        away, or at the same moment and later) means the arena is taken: this
        one stops, quietly. An older one is a holder that was away and came
        back (a frozen process waking): ours stands, and is said again so
        that the broker keeps it (that one stops when it sees ours)."""
        lease = self.arena.lease
        if lease is None or not payload:
            return
        if payload.decode("utf-8", "replace") == lease:
            self._lease_echoed = True
            return
        mine, other = Lease.parse(lease), Lease.parse(payload)
        if mine is not None and other is not None and not other.newer_than(mine):
            log.warning("[%s] an older lease came back (%s): this referee holds the arena", self.name, payload[:200])
            self.batch.publish(Publish(self.arena.topics.lease, lease, True))
            return
        if other is None and not self._lease_echoed:
            return  # unreadable, from before this referee's own came back: not a claim after it
        log.error("[%s] another referee took this arena over (lease %s); stopping", self.name, payload[:200])
        taken = f"arena {self.name}: another referee took it over (its lease: {payload[:200]!r})"
        self._halt(Fatal(Stop.ARENA_TAKEN, taken))
