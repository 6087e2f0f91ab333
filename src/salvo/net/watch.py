"""Watching a broker: a client that records what it receives and lets other
threads wait for a message. It knows nothing of the referee; the
conformance suite, the tournament director, the stress tools and the tests
all watch through it.

How much it keeps is chosen per watcher (``keep``): every message (a run
that ends), the latest message of each topic (a watcher that runs all
night: its memory is bounded by the topics, not the hours), or a ring of
the latest N. Positions count every message received whatever is kept, so
:meth:`Recorder.mark` and ``after`` mean the same in every mode; a message
that is no longer kept is simply not found.

A recorder runs its paho client on a thread of paho's (``loop_start``), or,
given a :class:`~salvo.net.loop.Loop`, on that loop's thread through a
:class:`~salvo.net.link.Link` (no thread of its own: ``salvo tournament run``
watches its arenas on the loop that serves them). Either way every other
thread reads and waits through the same condition, and hands its publishes
over.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import paho.mqtt.client as paho
from paho.mqtt.subscribeoptions import SubscribeOptions

from salvo.net.link import Link, logged
from salvo.net.mqtt import Broker, connect_async, new_client, read_qos

if TYPE_CHECKING:
    from salvo.net.loop import Loop

__all__ = ["Keep", "Msg", "NoReply", "Recorder", "wait_until"]

#: What a :class:`Recorder` keeps: "all", "latest" (per topic) or the latest N.
Keep = Literal["all", "latest"] | int

_ids = itertools.count()


class NoReply(TimeoutError):
    """Nothing waited for came in time (for the conformance suite: the referee
    did not answer). A broker that does not acknowledge is a plain TimeoutError."""


@dataclass(frozen=True)
class Msg:
    topic: str
    payload: bytes
    retain: bool
    at: float

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.payload)


class Recorder:
    """A connected client that records the messages it receives, in order
    (as many as ``keep`` says). Subscriptions use retain-as-published on
    MQTT 5, so the recorded retain flag is the one the publisher set.

    With a running ``loop``, its client is driven by that loop (a Link:
    reconnects with the link's back-off, no paho thread); construct it,
    publish, wait and close from any other thread."""

    def __init__(
        self,
        broker: Broker,
        filters: list[str] | tuple[str, ...] = (),
        label: str = "rec",
        *,
        keep: Keep = "all",
        loop: Loop | None = None,
    ) -> None:
        if keep not in ("all", "latest") and not (type(keep) is int and keep > 0):
            raise ValueError(f"keep must be 'all', 'latest' or a positive int, not {keep!r}")
        self.keep: Keep = keep
        self.received = 0  # every message ever received: the next one's position
        self._all: list[Msg] = []  # keep="all"
        self._ring: collections.deque[tuple[int, Msg]] = collections.deque(maxlen=keep if type(keep) is int else 0)
        self._latest: dict[str, tuple[int, Msg]] = {}  # topic -> its last message and position (every mode)
        #: (re)connections so far, and the position of the first message after each
        self.connects = 0
        self.connected_at = 0
        self.connections: list[int] = []
        self.acks: dict[int, int] = {}  # mid -> PUBACK reason code, for a publish() that waits for it
        #: mids nobody waits for (send(), QoS 0, a publish() that gave up), not yet acknowledged:
        #: their PUBACK is dropped, not kept (mids are reused: a kept one would answer a later publish)
        self._unacked: set[int] = set()
        #: called with every message received (on the thread that reads them: the loop's, on a loop)
        self.on_change: Callable[[Msg], None] | None = None
        self.broker = broker
        self._cond = threading.Condition()
        self._filters = list(filters)
        self._subscribed = threading.Event()
        self._connected = threading.Event()
        self._refused: str | None = None
        self.client = new_client(broker, f"salvo-{label}-{next(_ids)}-{time.monotonic_ns() % 10**9}")
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.on_publish = self._on_publish
        self.loop = loop
        self._link: Link | None = None
        connect_async(self.client, broker)  # any node of a cluster that answers
        if loop is None:
            self.client.loop_start()
        else:
            self._link = Link(
                loop, self.client, "watch", name=label, broker=broker, on_message=self._on_message, guard=logged(label)
            )
            loop.call_soon_threadsafe(self._link.start)
        if not self._connected.wait(10):
            self.close()
            if self._refused:  # the broker answered no: credentials, not the network
                raise ConnectionRefusedError(self._refused)
            raise ConnectionError(f"cannot connect to {broker.url}")
        if self._filters and not self._subscribed.wait(10):
            raise TimeoutError("subscription not acknowledged")

    @property
    def mqtt5(self) -> bool:
        """The connection speaks MQTT 5 (a broker may have refused it)."""
        return self.client.mqtt5

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            self._refused = f"broker refused {self.broker.username or 'anonymous'}: {rc}"
            return
        if self._link is not None:
            self._link.up()  # the next outage's back-off starts from the beginning
        with self._cond:
            self.connects += 1
            self.connected_at = self.received
            self.connections.append(self.received)
        self._connected.set()
        if self._filters:
            if self.client.mqtt5:
                options = SubscribeOptions(qos=1, retainAsPublished=True)
                client.subscribe([(f, options) for f in self._filters])
            else:
                client.subscribe([(f, read_qos(self.client)) for f in self._filters])

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        self._add(Msg(msg.topic, bytes(msg.payload), msg.retain, time.time()))

    def _add(self, m: Msg) -> None:
        with self._cond:
            position = self.received
            self.received += 1
            if self.keep == "all":
                self._all.append(m)
            elif self._ring.maxlen:
                self._ring.append((position, m))
            self._latest[m.topic] = (position, m)
            self._cond.notify_all()
        if self.on_change is not None:
            self.on_change(m)

    def forget_before(self, position: int) -> list[str]:
        """Drop the latest value of every topic last heard before
        ``position``: after a reconnect, once the broker has sent the
        subscription's retained messages again (a marker came back), a
        topic it did not send was cleared while this client was away (a
        deletion leaves no message to hear). The topics dropped."""
        with self._cond:
            gone = [topic for topic, (at, _m) in self._latest.items() if at < position]
            for topic in gone:
                del self._latest[topic]
            return gone

    def _on_publish(self, _c: paho.Client, _u: Any, mid: int, rc: Any, _p: Any) -> None:
        with self._cond:
            if mid in self._unacked:  # nobody waits for it (but flush)
                self._unacked.discard(mid)
                self._cond.notify_all()
                return
            self.acks[mid] = rc.value if hasattr(rc, "value") else int(rc)
            self._cond.notify_all()

    def _kept(self, after: int) -> list[Msg]:
        """The kept messages at positions ``after`` on, oldest first (lock held)."""
        if self.keep == "all":
            return self._all[after:]
        if self.keep == "latest":
            return [m for _i, m in sorted(v for v in self._latest.values() if v[0] >= after)]
        return [m for i, m in self._ring if i >= after]

    @property
    def messages(self) -> list[Msg]:
        """The kept messages, oldest first (a copy): with keep="all", message
        ``i`` is the one at position ``i``."""
        with self._cond:
            return self._kept(0)

    def publish(self, topic: str, payload: str | bytes, retain: bool = False, qos: int = 1) -> int:
        """Publish and wait for the PUBACK; its reason code (0 ok, 0x87 not authorized).
        Not on a loop's own thread (it would wait for itself): :meth:`send` there."""
        if self.loop is not None and self.loop.in_thread():
            raise RuntimeError("Recorder.publish would wait for its own loop: send() on the loop's thread")
        info = self._publish(topic, payload, qos, retain, waited=qos > 0)
        if qos == 0:
            return 0
        with self._cond:
            if not self._cond.wait_for(lambda: info.mid in self.acks, 10):
                self._unacked.add(info.mid)  # (if it comes after all: nobody reads it)
                raise TimeoutError(f"no PUBACK for {topic}")
            return self.acks.pop(info.mid)

    def send(self, topic: str, payload: str | bytes, retain: bool = False, qos: int = 1) -> None:
        """Publish without waiting for the PUBACK, from any thread (the
        loop's too); :meth:`flush` waits for every PUBACK of these."""
        self._publish(topic, payload, qos, retain, waited=False)

    def flush(self, timeout: float) -> bool:
        """From a thread but the loop's: wait until the broker has acknowledged
        everything :meth:`send` sent (a QoS 0 message: paho wrote it); False
        when it has not in time."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._unacked, timeout)

    def _publish(
        self, topic: str, payload: str | bytes, qos: int, retain: bool, *, waited: bool
    ) -> paho.MQTTMessageInfo:
        def publish() -> paho.MQTTMessageInfo:
            info = self.client.publish(topic, payload, qos=qos, retain=retain)
            if not waited and (qos or info.rc == paho.MQTT_ERR_SUCCESS):  # (a QoS 0 refused: no callback comes)
                with self._cond:
                    # Its PUBACK is dropped when it comes; paho's thread may have read it already.
                    if self.acks.pop(info.mid, None) is None:
                        self._unacked.add(info.mid)
            return info

        loop = self.loop
        if loop is None or loop.in_thread():
            return publish()
        # paho on a loop is the loop's alone: handed over, its message id handed back.
        handed: Future[paho.MQTTMessageInfo] = Future()

        def hand_over() -> None:
            try:
                handed.set_result(publish())
            except Exception as exc:  # (a payload paho refuses: the caller's error)
                handed.set_exception(exc)

        loop.call_soon_threadsafe(hand_over)
        return handed.result(10)

    def mark(self) -> int:
        """The position the next message will have."""
        with self._cond:
            return self.received

    def wait(self, pred: Callable[[Msg], bool], after: int = 0, timeout: float = 10.0, what: str = "") -> Msg:
        """The first kept message from position ``after`` on that ``pred``
        accepts, waiting up to ``timeout`` for it (else :class:`NoReply`)."""

        def found() -> Msg | None:
            return next((m for m in self._kept(after) if pred(m)), None)

        with self._cond:
            msg = self._cond.wait_for(found, timeout)
            if msg is None:
                raise NoReply(f"nothing {what or 'expected'} within {timeout:g}s")
            return msg

    def wait_for(self, topic: str, payload: str | None = None, after: int = 0, timeout: float = 10.0) -> Msg:
        return self.wait(
            lambda m: m.topic == topic and (payload is None or m.payload == payload.encode()),
            after,
            timeout,
            what=f"on {topic}" + (f" = {payload!r}" if payload is not None else ""),
        )

    def sync(self, topic: str, timeout: float = 10.0) -> None:
        """Publish a unique marker on ``topic`` (which this client reads) and
        wait for it to come back. The broker hands a subscriber its messages
        in the order it took them, so by then every message the broker took
        before the marker is here: "nothing came" can be asserted without a
        sleep."""
        marker = f"sync-{uuid.uuid4().hex}".encode()
        after = self.mark()
        self.publish(topic, marker)
        self.wait(lambda m: m.topic == topic and m.payload == marker, after, timeout, what="the sync marker back")

    def on(self, topic: str, after: int = 0) -> list[Msg]:
        with self._cond:
            return [m for m in self._kept(after) if m.topic == topic]

    def since(self, after: int) -> list[Msg]:
        with self._cond:
            return self._kept(after)

    def latest(self, topic: str) -> Msg | None:
        with self._cond:
            kept = self._latest.get(topic)
            return kept[1] if kept is not None else None

    def text(self, topic: str) -> str | None:
        """The latest payload on ``topic`` as text (None: nothing came)."""
        msg = self.latest(topic)
        return msg.text if msg is not None else None

    def wait_until(self, pred: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``pred()`` holds, looking again at every message."""
        with self._cond:
            return self._cond.wait_for(pred, timeout)

    def close(self) -> None:
        if self._link is None:
            self.client.disconnect()
            self.client.loop_stop()
        elif self.loop is not None and not self.loop.closed:
            self.loop.call_soon_threadsafe(self._link.close)  # DISCONNECT, no reconnecting


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``pred`` until it holds (else :class:`NoReply`): for state that
    no :class:`Recorder` sees change."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.01)
    raise NoReply(f"{what} not reached within {timeout:g}s")
