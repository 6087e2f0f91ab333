"""MQTT helpers for integration tests: a recording client and a scripted team
that speaks the protocol with nothing but paho and the crypto module."""

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

from mosquitto import Mosquitto

_ids = itertools.count()


@dataclass(frozen=True)
class Msg:
    topic: str
    payload: bytes
    retain: bool

    @property
    def text(self) -> str:
        return self.payload.decode()

    def json(self) -> Any:
        return json.loads(self.payload)


class Recorder:
    """A connected client that records every message it receives, in order."""

    def __init__(self, broker: Mosquitto, user: str | None, filters: list[str] | tuple[str, ...]) -> None:
        self.messages: list[Msg] = []
        self.acks: dict[int, int] = {}  # mid -> PUBACK reason code
        self._cond = threading.Condition()
        self._filters = list(filters)
        self._subscribed = threading.Event()
        self.client = new_client(Broker.from_url(broker.url(user)), f"test-{next(_ids)}")
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.on_publish = self._on_publish
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        if self._filters and not self._subscribed.wait(10):
            raise TimeoutError("subscription not acknowledged")

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if self._filters:
            # retain-as-published: live messages keep the retain flag the
            # referee set, so tests can check it.
            options = SubscribeOptions(qos=1, retainAsPublished=True)
            client.subscribe([(f, options) for f in self._filters])

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(Msg(msg.topic, msg.payload, msg.retain))
            self._cond.notify_all()

    def _on_publish(self, _c: paho.Client, _u: Any, mid: int, rc: Any, _p: Any) -> None:
        with self._cond:
            self.acks[mid] = rc.value
            self._cond.notify_all()

    def publish(self, topic: str, payload: str | bytes, retain: bool = False, qos: int = 1) -> int:
        """Publish and wait for the broker's PUBACK; return its reason code
        (0 accepted, 0x87 not authorized)."""
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
                recent = "\n".join(f"  {m.topic} {m.payload[:80]!r}" for m in self.messages[after:][-15:])
                raise TimeoutError(f"no message {what} within {timeout}s; last ones:\n{recent}")
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

    def latest(self, topic: str) -> Msg | None:
        found = self.on(topic)
        return found[-1] if found else None

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@functools.cache
def team_key(name: str, secret: str) -> bytes:
    return crypto.derive_team_key(name, secret)


class Team:
    """A scripted team: joins, places, fires; records its private and the
    public topics. Logs in with its name when the broker knows it, else as a
    plain team user that the ACL lets join and fire (never place)."""

    def __init__(
        self, broker: Mosquitto, prefix: str, name: str, secret: str | None = None, login: str | None = None
    ) -> None:
        self.name = name
        self.secret = secret or f"{name}-secret"
        self.t = Topics(prefix)
        user = login or (name if name in broker.users else "referee")
        self.rec = Recorder(broker, user, [self.t.private_filter(name), *self.t.public_filters])

    @property
    def key(self) -> bytes:
        return team_key(self.name, self.secret)

    def join(self, sealed: bool = False) -> None:
        request = json.dumps({"name": self.name, "secret": self.secret})
        if sealed:
            pubkey = self.rec.wait_for(self.t.pubkey).text
            request = crypto.seal_to(pubkey, request)
        self.rec.publish(self.t.request_participation, request)

    def place(self, ship: str, placement: Placement) -> None:
        body = {"coordinates": f"{placement.x};{placement.y}", "orientation": placement.orientation.value}
        self.rec.publish(self.t.place(self.name, ship), crypto.seal(self.key, json.dumps(body)))

    def place_fleet(self, fleet: dict[str, Placement]) -> None:
        for ship, placement in fleet.items():
            self.place(ship, placement)

    def fire(self, target: str, x: int, y: int, turn: int | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"x": x, "y": y} if turn is None else {"x": x, "y": y, "turn": turn}
        message = crypto.sign(self.key, data)
        self.rec.publish(self.t.fire(target), json.dumps(message))
        return message

    def close(self) -> None:
        self.rec.close()


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.01)
    raise TimeoutError(f"{what} not reached within {timeout}s")
