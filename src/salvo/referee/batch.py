"""What one arena does with what it received: inbox items become engine
effects, and a batch of them is journaled, then published, then
acknowledged (see Dispatcher._flush). The connections and the arena's
states around it are :mod:`salvo.referee.runner`'s."""

from __future__ import annotations

import abc
import collections
import enum
import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Final, Protocol

import paho.mqtt.client as paho

from salvo.arena.arena import Arena, DeriveKey, Effect, Log, Record
from salvo.game.events import Event
from salvo.net.link import Link, acknowledged
from salvo.net.loop import Loop
from salvo.net.mqtt import Client
from salvo.referee.admission import Registry
from salvo.referee.flood import BROKER_INFLIGHT, REPORTS_PER_S, LagClock, RejectionLog, ReportBudget
from salvo.referee.ownership import Lease
from salvo.spec import crypto
from salvo.spec.errors import Code, Illegal, Rejection
from salvo.spec.payloads import Publish

log = logging.getLogger("salvo.referee")

#: Journaled events wait for their SQLite commit until the loop has nothing
#: to do, or until there are this many (see Dispatcher._flush).
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


class Dispatcher(abc.ABC):
    """One arena's batches. The runner built on it supplies the connections
    (``client`` acknowledges, ``out`` publishes through ``_pub``) and what
    the inbox's control items start: the sweep, a stop."""

    client: Client
    out: Client
    _pub: Link

    def __init__(
        self,
        arena: Arena,
        *,
        pool: Executor,
        journal: Journal | None,
        clock: Callable[[], float],
        registry: Registry | None,
        loop: Loop,
    ) -> None:
        self.arena = arena
        self.name = arena.topics.prefix or "(default)"
        self.loop = loop
        self._pool = pool
        self._journal = journal
        self._clock = clock
        self._registry = registry
        self.dropped_reports = 0
        self.rejections = RejectionLog(self.name, clock)
        self._reports = ReportBudget(clock)
        self.cleared_retained = 0
        self.poisoned = 0  # messages that met a bug (see _dispatch)
        self._lag = LagClock()
        #: The acknowledgements of join messages whose derivation is under
        #: way, by job: sent once the join's outcome is durable (or refused).
        self._held: dict[int, list[tuple[int, int]]] = {}
        #: Batches whose publishes await the broker's PUBACK, with the journal
        #: id they complete; then the journal marks them published.
        self._unacked: collections.deque[tuple[int, list[paho.MQTTMessageInfo]]] = collections.deque()
        self._mark = 0  # the journal id the batch being built completes, without records of its own
        #: The journal id a restart's backlog ends at, until the broker has it all (see _note_published).
        self._backlog_end = 0
        #: This referee's lease came back from the broker: from then on
        #: another lease means the arena was taken over.
        self._lease_echoed = False
        # The batch being worked through (see _flush).
        self._records: list[tuple[str, int, Event]] = []
        self._outbox: list[Publish] = []
        self._acks: list[tuple[int, int]] = []

    # -- what the runner supplies --------------------------------------------------------

    @property
    @abc.abstractmethod
    def is_up(self) -> bool:
        """Presence was announced (and the subscribing connection is up)."""

    @abc.abstractmethod
    def _sweep_after_connect(self, session_present: bool) -> None:
        """A Connected item's turn came: start the sweep."""

    @abc.abstractmethod
    def _halt(self, fatal: Fatal | None) -> None:
        """Stop once the current batch is out."""

    @abc.abstractmethod
    def _enqueue(self, item: object) -> None:
        """On the loop's thread: put ``item`` into the inbox."""

    # -- one batch -----------------------------------------------------------------------

    def _dispatch(self, item: object) -> None:
        now = self._clock()
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
                self._execute(effects)
            if item.qos > 0:
                # A join waits for its key derivation: acknowledged only once its
                # outcome is journaled (or refused), so a referee killed meanwhile
                # gets the join again from the broker.
                (self._held[id(job)] if job is not None else self._acks).append((item.mid, item.qos))
        elif isinstance(item, KeyDone):
            exc = item.future.exception()
            if exc is None:
                self._execute(self.arena.on_key(item.job, item.future.result(), now))
            else:
                if not isinstance(exc, Rejection):
                    log.error("[%s] key derivation for %s failed", self.name, item.job.name, exc_info=exc)
                    exc = Illegal(Code.BUSY, "busy: the join could not be checked; try again")
                self._execute(self.arena.on_key_failed(item.job, exc, now))
            self._acks += self._held.pop(id(item.job), [])
        elif isinstance(item, LeaseSeen):
            self._check_lease(item.lease)
        elif isinstance(item, ProbeSeen):
            self._lag.returned(item.token, now)
            if item.qos > 0:
                self._acks.append((item.mid, item.qos))
        elif isinstance(item, OutConnected):
            # A reconnect: its last will may have said "down" meanwhile. (Up
            # for the first time, the presence the sweep ends with says "up".)
            if item.was_up and self.is_up:
                self._outbox.append(Publish(self.arena.topics.server, "up", True))
        elif isinstance(item, Control):
            effects = item.action(self.arena, now)
            self._execute(effects)
            self._flush()
            item.done.set_result(any(isinstance(e, Record) for e in effects))
        elif isinstance(item, Connected):
            self._sweep_after_connect(item.session_present)

    def _clear_retained(self, item: Message) -> None:
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
                self._outbox.append(effect)
            elif isinstance(effect, Record):
                self._records.append((self.arena.topics.prefix, effect.game_no, effect.event))
            elif isinstance(effect, DeriveKey):
                if id(effect) not in self._held:  # (a repeat of a join gets the job under way)
                    self._held[id(effect)] = []
                    future = self._pool.submit(_team_key, self._registry, effect)
                    future.add_done_callback(self._key_callback(effect))
            elif isinstance(effect, Log):
                self.rejections.emit(effect)

    def _flush(self) -> None:
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
        publish = self.out.publish
        infos = [publish(e.topic, e.payload, qos=1, retain=e.retain) for e in self._outbox]
        self._outbox.clear()
        if mark and journal is not None:
            self._unacked.append((mark, infos))
        self._pub.write_now()  # the results on the wire before the acks
        if len(self._acks) >= BROKER_INFLIGHT:
            # The broker sent as many as it may before our acks: it had more
            # waiting for us, queued at its end (and, full, dropped).
            self._lag.behind()
        for mid, qos in self._acks:
            self.client.ack(mid, qos)
        self._acks.clear()
        if journal is not None and journal.pending:
            if journal.pending >= SETTLE_MAX:
                journal.settle()
            else:
                self.loop.call_when_idle(journal.settle)

    def _note_published(self) -> None:
        """PUBACKs came in: tell the journal which batches' results the
        broker has (a restart publishes again only what came after; see
        salvo.arena.resume)."""
        unacked, journal = self._unacked, self._journal
        last = 0
        while unacked and all(map(acknowledged, unacked[0][1])):
            last = unacked.popleft()[0]
        if last and journal is not None:
            journal.mark_published(self.arena.topics.prefix, last)
            if self._backlog_end and last >= self._backlog_end:
                # A mark is written with the next settle, which may be the next
                # join minutes later; killed meanwhile, the referee would publish
                # the backlog again, and a backlog can end a game: its last hits
                # would then go out after the new lobby. Written now.
                self._backlog_end = 0
                self.loop.call_when_idle(journal.settle)

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
            self._outbox.append(Publish(self.arena.topics.lease, lease, True))
            return
        if other is None and not self._lease_echoed:
            return  # unreadable, from before this referee's own came back: not a claim after it
        log.error("[%s] another referee took this arena over (lease %s); stopping", self.name, payload[:200])
        taken = f"arena {self.name}: another referee took it over (its lease: {payload[:200]!r})"
        self._halt(Fatal(Stop.ARENA_TAKEN, taken))

    def _key_callback(self, job: DeriveKey) -> Callable[[Future[bytes]], None]:
        def done(future: Future[bytes]) -> None:  # on a pool thread: only hand the result over
            self.loop.call_soon_threadsafe(self._enqueue, KeyDone(job, future))

        return done


def _team_key(registry: Registry | None, job: DeriveKey) -> bytes:
    """On a pool thread: check a registered team's secret when the registry
    could not at once (an old entry: argon2id), then derive its team key
    (argon2id; the spec's KDF)."""
    if registry is not None and job.verify:
        registry.verify(job.name, job.secret)
    return crypto.derive_team_key(job.name, job.secret)
