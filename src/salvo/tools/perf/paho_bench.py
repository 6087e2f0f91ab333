"""paho's reading of one packet as paho comes, and with each of
:mod:`salvo.net.pahofast`'s speed-ups added (what the referee's links
use): the reason each exists, measured. No broker: a socket pair."""

from __future__ import annotations

import socket
import struct
import time

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, _ConnectionState
from paho.mqtt.properties import Properties

from salvo.net import pahofast
from salvo.tools.perf.broker_bench import ECHO_PAYLOAD
from salvo.tools.perf.results import Results, percentile

TOPIC = b"/arena/players/team-b/fire"


def _publish(mid: int) -> bytes:
    """A QoS 1 PUBLISH of a fire message's size, MQTT 5 (no properties)."""
    body = struct.pack("!H", len(TOPIC)) + TOPIC + struct.pack("!H", mid) + b"\x00" + ECHO_PAYLOAD
    return bytes([0x32, (len(body) & 127) | 128, len(body) >> 7]) + body


def _puback(mid: int) -> bytes:
    return bytes([0x40, 2]) + struct.pack("!H", mid)


def read_us(packet: str, n: int, *, whole: bool = False) -> float:
    """Median microseconds of ``loop_read`` for one packet of the kind, by a
    client that reads ``whole`` packets or paho's own way, handing a
    PUBLISH to an ``on_message`` that does nothing."""
    client = pahofast.WholePackets(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5, manual_ack=True)
    client.whole_packets = whole
    client.on_message = lambda _c, _u, _m: None
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    client._sock = ours  # noqa: SLF001 (paho private: a socket of our own, no broker; guarded: test_brokers)
    client._state = _ConnectionState.MQTT_CS_CONNECTED  # noqa: SLF001 (paho private, as above; guarded: test_brokers)
    times = []
    try:
        for i in range(n):
            mid = i % 60000 + 1
            if packet == "puback":
                client._out_messages[mid] = paho.MQTTMessage(mid)  # noqa: SLF001 (paho private: one in flight; guarded: test_brokers)
            theirs.send(_publish(mid) if packet == "publish" else _puback(mid))
            t0 = time.perf_counter_ns()
            rc = client.loop_read()
            times.append((time.perf_counter_ns() - t0) / 1000)
            if rc != paho.MQTT_ERR_SUCCESS:
                raise RuntimeError(f"paho could not read the {packet}: {rc}")
    finally:
        ours.close()
        theirs.close()
    return percentile(times[n // 10 :], 50)


def bench_paho(res: Results, n: int) -> None:
    """paho as it comes, then with shared tables, then reading whole packets too."""
    for label, made, whole in (
        ("paho", Properties, False),
        ("shared", pahofast.SharedTables, False),
        ("whole", pahofast.SharedTables, True),
    ):
        before = pahofast.install(made)
        try:
            for packet in ("publish", "puback"):
                res.put(f"paho.{packet}_read_{label}_us", read_us(packet, n, whole=whole))
        finally:
            pahofast.install(before)
