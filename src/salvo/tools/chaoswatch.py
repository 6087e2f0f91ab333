"""The chaos runs' witness: a recorder of everything one arena publishes, in
order, as a team sees it (:class:`Watcher`), and the predicates the runs
wait on (:func:`on`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.subscribeoptions import SubscribeOptions

from salvo.net.mqtt import Broker, Client, connect_async, new_client, read_qos
from salvo.net.watch import Msg
from salvo.spec.topics import Topics


class Watcher:
    """Records every message of one arena, in order, on a persistent session
    (a broker restarted with persistence keeps what it queued for it), and
    publishes for the teams on the same connection (in order, queued while
    the broker is away), or on a connection of their own to ``teams`` (the
    nats scenario: the teams on nodes that are killed, the watcher on one
    that is not)."""

    def __init__(self, broker: Broker, prefix: str, teams: Broker | None = None) -> None:
        self.messages: list[Msg] = []
        self.subscribed = 0
        self._cond = threading.Condition()
        self._filter = Topics(prefix).everything()
        self.client = new_client(broker, f"salvo-chaos-{os.urandom(5).hex()}", persistent=True)
        self.client.reconnect_delay_set(1, 1)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        connect_async(self.client, broker, session_expiry_s=600)
        self.client.loop_start()
        self.sender: Client = self.client
        if teams is not None:
            self.sender = new_client(teams, f"salvo-chaos-teams-{os.urandom(5).hex()}", persistent=True)
            self.sender.reconnect_delay_set(1, 1)
            connect_async(self.sender, teams, session_expiry_s=600)
            self.sender.loop_start()
        with self._cond:
            if not self._cond.wait_for(lambda: self.subscribed > 0, 10):
                raise ConnectionError(f"cannot watch {broker.url}")

    def _on_connect(self, client: Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            return
        if client.mqtt5:
            client.subscribe(self._filter, options=SubscribeOptions(qos=1, retainAsPublished=True))
        else:
            # MQTT 3.1.1 (NATS): QoS 0, served by the watcher's own node (a
            # QoS 1 subscription there is a JetStream consumer that may sit
            # on another node and go silent when that node dies: read_qos).
            client.subscribe(self._filter, read_qos(client))

    def _on_subscribe(self, *_a: Any) -> None:
        with self._cond:
            self.subscribed += 1
            self._cond.notify_all()

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(Msg(msg.topic, bytes(msg.payload), msg.retain, time.time()))
            self._cond.notify_all()

    def publish(self, topic: str, payload: str | bytes, retain: bool = False) -> paho.MQTTMessageInfo:
        return self.sender.publish(topic, payload, qos=1, retain=retain)

    def mark(self) -> int:
        with self._cond:
            return len(self.messages)

    def wait(self, pred: Callable[[Msg], bool], after: int, timeout: float) -> tuple[int, Msg] | None:
        """The first message from ``after`` on that ``pred`` accepts, and its index."""
        with self._cond:
            found: list[tuple[int, Msg]] = []

            def look() -> bool:
                for i in range(after, len(self.messages)):
                    if pred(self.messages[i]):
                        found.append((i, self.messages[i]))
                        return True
                return False

            return found[0] if self._cond.wait_for(look, timeout) else None

    def wait_subscribed(self, more_than: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.subscribed > more_than, timeout)

    def latest(self, topic: str) -> Msg | None:
        with self._cond:
            return next((m for m in reversed(self.messages) if m.topic == topic), None)

    def close(self) -> None:
        for client in {self.sender, self.client}:
            client.disconnect()
            client.loop_stop()


def on(topic: str, *, equals: bytes | None = None, starts: bytes = b"", has: bytes = b"") -> Callable[[Msg], bool]:
    """A message on ``topic``: payload ``equals``, or starts with ``starts`` and holds ``has``."""
    if equals is not None:
        return lambda m: m.topic == topic and m.payload == equals
    return lambda m: m.topic == topic and m.payload.startswith(starts) and has in m.payload
