"""Black-box MQTT tools for the conformance suite (and our own tests).

Only the protocol library is used here (topics, wire, crypto, mqtt): never
the referee's engine, protocol layer or adapter, so the suite judges any
referee by what it publishes.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.subscribeoptions import SubscribeOptions

from salvo import crypto
from salvo.mqtt import Broker, new_client
from salvo.rules import Placement
from salvo.topics import Topics

_ids = itertools.count()


class NoReply(TimeoutError):
    """Nothing the suite waited for came in time: the referee did not answer.
    (A broker that does not acknowledge is a plain TimeoutError.)"""


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
    """A connected client that records every message it receives, in order.
    Subscriptions use retain-as-published on MQTT 5, so the recorded retain
    flag is the one the publisher set."""

    def __init__(self, broker: Broker, filters: list[str] | tuple[str, ...] = (), label: str = "rec") -> None:
        self.messages: list[Msg] = []
        self._latest: dict[str, Msg] = {}  # topic -> its last message
        self.acks: dict[int, int] = {}  # mid -> PUBACK reason code
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
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        if not self._connected.wait(10):
            self.close()
            raise ConnectionError(self._refused or f"cannot connect to {broker.url}")
        if self._filters and not self._subscribed.wait(10):
            raise TimeoutError("subscription not acknowledged")

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            self._refused = f"broker refused {self.broker.username or 'anonymous'}: {rc}"
            return
        self._connected.set()
        if self._filters:
            if self.broker.mqtt5:
                options = SubscribeOptions(qos=1, retainAsPublished=True)
                client.subscribe([(f, options) for f in self._filters])
            else:
                client.subscribe([(f, 1) for f in self._filters])

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            m = Msg(msg.topic, bytes(msg.payload), msg.retain, time.time())
            self.messages.append(m)
            self._latest[m.topic] = m
            self._cond.notify_all()

    def _on_publish(self, _c: paho.Client, _u: Any, mid: int, rc: Any, _p: Any) -> None:
        with self._cond:
            self.acks[mid] = rc.value if hasattr(rc, "value") else int(rc)
            self._cond.notify_all()

    def publish(self, topic: str, payload: str | bytes, retain: bool = False, qos: int = 1) -> int:
        """Publish and wait for the PUBACK; its reason code (0 ok, 0x87 not authorized)."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        if qos == 0:
            return 0
        with self._cond:
            if not self._cond.wait_for(lambda: info.mid in self.acks, 10):
                raise TimeoutError(f"no PUBACK for {topic}")
            return self.acks[info.mid]

    def mark(self) -> int:
        with self._cond:
            return len(self.messages)

    def wait(self, pred: Callable[[Msg], bool], after: int = 0, timeout: float = 10.0, what: str = "") -> Msg:
        def found() -> Msg | None:
            return next((m for m in self.messages[after:] if pred(m)), None)

        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None, timeout):
                raise NoReply(f"nothing {what or 'expected'} within {timeout:g}s")
            msg = found()
            assert msg is not None
            return msg

    def wait_for(self, topic: str, payload: str | None = None, after: int = 0, timeout: float = 10.0) -> Msg:
        return self.wait(
            lambda m: m.topic == topic and (payload is None or m.payload == payload.encode()),
            after,
            timeout,
            what=f"on {topic}" + (f" = {payload!r}" if payload is not None else ""),
        )

    def on(self, topic: str, after: int = 0) -> list[Msg]:
        with self._cond:
            return [m for m in self.messages[after:] if m.topic == topic]

    def since(self, after: int) -> list[Msg]:
        with self._cond:
            return self.messages[after:]

    def latest(self, topic: str) -> Msg | None:
        with self._cond:
            return self._latest.get(topic)

    def wait_until(self, pred: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``pred()`` holds, looking again at every message."""
        with self._cond:
            return self._cond.wait_for(pred, timeout)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@functools.lru_cache(maxsize=256)
def team_key(name: str, secret: str) -> bytes:
    return crypto.derive_team_key(name, secret)


class Team:
    """A scripted team that publishes through its own login."""

    def __init__(self, conn: Recorder, topics: Topics, name: str, secret: str) -> None:
        self.conn, self.t, self.name, self.secret = conn, topics, name, secret

    @property
    def key(self) -> bytes:
        return team_key(self.name, self.secret)

    def join(self, pubkey: str | None = None, request_id: str | None = None) -> None:
        body: dict[str, str] = {"name": self.name, "secret": self.secret}
        if request_id is not None:
            body["request_id"] = request_id
        request = json.dumps(body)
        if pubkey is not None:
            request = crypto.seal_to(pubkey, request)
        self.conn.publish(self.t.request_participation, request)

    def place_raw(self, ship: str, body: str, key: bytes | None = None) -> None:
        self.conn.publish(self.t.place(self.name, ship), crypto.seal(key or self.key, body))

    def place(self, ship: str, p: Placement) -> None:
        self.place_raw(ship, json.dumps({"coordinates": f"{p.x};{p.y}", "orientation": p.orientation.value}))

    def signed(self, data: Any) -> str:
        return json.dumps(crypto.sign(self.key, data))

    def fire(self, target: str, x: int, y: int, turn: int, game: str) -> str:
        """A bound (v2) shot: signed for its target, turn and game."""
        message = self.signed(fire_data(target, x, y, turn, game))
        self.conn.publish(self.t.fire(target), message)
        return message


def fire_data(target: str, x: int, y: int, turn: int, game: str) -> dict[str, Any]:
    """The signed data of a v2 fire message."""
    return {"x": x, "y": y, "target": target, "turn": turn, "game": game}


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.01)
    raise NoReply(f"{what} not reached within {timeout:g}s")
