"""The test double of :class:`salvo.referee.batch.Transport`: a broker in
memory, which takes publishes and acknowledgements and answers with a
PUBACK only when the test says so (as httpcore's mock backend answers with
the bytes a test gave it). Every call, and every journal call that
succeeded, lands in one timeline, so a test reads the order in which a
batch spooled, published, wrote and acknowledged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from salvo.arena.journal import Store
from salvo.game.events import Event

#: ("spool", last id), ("publish", topic), ("write", None), ("ack", mid),
#: ("settle", None), ("mark", event id): in the order they happened
Timeline = list[tuple[str, object]]


@dataclass(eq=False)
class FakeReceipt:
    topic: str
    payload: str | bytes
    retain: bool
    pubacked: bool = False

    def acknowledged(self) -> bool:
        return self.pubacked


class FakeTransport:
    """What a batch handed to the broker. ``puback`` plays the broker's
    acknowledgements, in any order the test likes."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        self.timeline: Timeline = timeline if timeline is not None else []
        self.sent: list[FakeReceipt] = []
        self.acked: list[int] = []

    def publish(self, topic: str, payload: str | bytes, retain: bool) -> FakeReceipt:
        receipt = FakeReceipt(topic, payload, retain)
        self.sent.append(receipt)
        self.timeline.append(("publish", topic))
        return receipt

    def write(self) -> None:
        self.timeline.append(("write", None))

    def ack(self, mid: int, qos: int) -> None:
        self.acked.append(mid)
        self.timeline.append(("ack", mid))

    def puback(self, *receipts: FakeReceipt) -> None:
        """The broker has these (all sent so far, when none are named)."""
        for receipt in receipts or tuple(self.sent):
            receipt.pubacked = True

    @property
    def topics(self) -> list[str]:
        return [r.topic for r in self.sent]


class RecordingJournal:
    """A real :class:`Store` whose successful writes land in the timeline
    (a call that raises leaves no trace: it did not happen)."""

    def __init__(self, store: Store, timeline: Timeline) -> None:
        self.store = store
        self.timeline = timeline

    def record_many(self, entries: list[tuple[str, int, Event]]) -> int:
        last = self.store.record_many(entries)
        self.timeline.append(("spool", last))
        return last

    def settle(self) -> None:
        self.store.settle()
        self.timeline.append(("settle", None))

    def mark_published(self, arena: str, event_id: int) -> None:
        self.store.mark_published(arena, event_id)
        self.timeline.append(("mark", event_id))

    def check_intact(self) -> None:
        self.store.check_intact()

    @property
    def pending(self) -> int:
        return self.store.pending


class Idle:
    """The loop's call_when_idle: what waits for an idle loop runs when the
    test says the loop is idle (once each, as the loop does)."""

    def __init__(self) -> None:
        self.waiting: dict[Callable[[], object], None] = {}

    def __call__(self, callback: Callable[[], object]) -> None:
        self.waiting[callback] = None

    def run(self) -> None:
        waiting, self.waiting = self.waiting, {}
        for callback in waiting:
            callback()
