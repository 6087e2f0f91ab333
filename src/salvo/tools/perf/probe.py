"""A lean MQTT client for measuring: every message with its arrival time."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho

from salvo.net.mqtt import Broker, connect_async, new_client


class Probe:
    """One paho connection; every message lands in a queue with its arrival
    time, or goes to ``on_message`` on the network thread."""

    def __init__(self, broker: Broker, filters: list[str], label: str) -> None:
        self.inbox: queue.Queue[tuple[str, bytes, float]] = queue.Queue()
        self.on_message: Callable[[str, bytes, float], None] | None = None
        self._subscribed = threading.Event()
        self._connected = threading.Event()
        self._filters = list(filters)
        self.client = new_client(broker, f"bench-{label}-{os.urandom(3).hex()}")
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.on_message = self._message
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *_a: self._subscribed.set()
        connect_async(self.client, broker)  # any node of a cluster that answers
        self.client.loop_start()
        if not self._connected.wait(10):
            self.client.loop_stop()
            raise ConnectionError(f"cannot connect to {broker.url}")
        if filters and not self._subscribed.wait(10):
            raise TimeoutError("subscription not acknowledged")

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            return
        if self._filters:  # (again after a reconnect: a new node may not have the session)
            client.subscribe([(f, 1) for f in self._filters])
        self._connected.set()

    def subscribe(self, filters: list[str], timeout: float = 10.0) -> None:
        """Subscribe to more, and wait for the broker's acknowledgement."""
        self._filters += filters
        self._subscribed.clear()
        self.client.subscribe([(f, 1) for f in filters])
        if not self._subscribed.wait(timeout):
            raise TimeoutError("subscription not acknowledged")

    def _message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        now = time.perf_counter()
        if self.on_message is not None:
            self.on_message(msg.topic, bytes(msg.payload), now)
        else:
            self.inbox.put((msg.topic, bytes(msg.payload), now))

    def publish(self, topic: str, payload: str | bytes, qos: int = 1) -> None:
        self.client.publish(topic, payload, qos=qos)

    def expect(self, pred: Callable[[str, bytes], bool], timeout: float = 30.0) -> tuple[str, bytes, float]:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("the expected message did not come")
            topic, payload, at = self.inbox.get(timeout=left)
            if pred(topic, payload):
                return topic, payload, at

    def expect_topic(self, topic: str, timeout: float = 30.0) -> tuple[str, bytes, float]:
        return self.expect(lambda tp, _p: tp == topic, timeout)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def read_retained(broker: Broker, topic: str, timeout: float = 30.0) -> bytes:
    """The retained payload of ``topic`` (waits for a non-empty one)."""
    probe = Probe(broker, [topic], "retained")
    try:
        return probe.expect(lambda tp, p: tp == topic and bool(p), timeout)[1]
    finally:
        probe.close()
