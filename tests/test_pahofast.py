"""salvo.net.pahofast: paho's Properties with shared constant tables read
and write what paho's own do, and one object's properties stay its own."""

from __future__ import annotations

import socket
import struct
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, _ConnectionState
from paho.mqtt.exception import MQTTException
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from salvo.net import pahofast
from salvo.net.pahofast import SharedTables
from salvo.tools.perf.paho_bench import read_us


def _filled(cls: type[Properties]) -> Any:
    props: Any = cls(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = 30
    props.ContentType = "application/json"
    props.UserProperty = [("team", "alan"), ("turn", "3")]
    return props


def test_the_tables_are_pahos_own() -> None:
    own: Any = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    assert (SharedTables.types, SharedTables.names, SharedTables.properties) == (own.types, own.names, own.properties)


def test_what_one_packs_the_other_unpacks_the_same() -> None:
    for writer, reader in ((Properties, SharedTables), (SharedTables, Properties)):
        packed = _filled(writer).pack()
        back: Any = reader(PacketTypes.PUBLISH)
        back.unpack(packed)
        assert back.json() == _filled(Properties).json()
        assert back.pack() == packed


def test_an_objects_properties_are_its_own_and_checked_as_pahos_are() -> None:
    first = _filled(SharedTables)
    second: Any = SharedTables(PacketTypes.PUBLISH)
    assert second.isEmpty() and not first.isEmpty()
    first.clear()
    assert first.isEmpty() and vars(first) == {"packetType": PacketTypes.PUBLISH}
    with pytest.raises(MQTTException, match="does not apply"):
        second.SessionExpiryInterval = 5  # a CONNECT property, not a PUBLISH's


def test_a_message_read_through_paho_keeps_its_properties() -> None:
    """A PUBLISH with properties, read by paho's loop_read once installed."""
    before = pahofast.install()
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    got: list[paho.MQTTMessage] = []
    client.on_message = lambda _c, _u, m: got.append(m)
    ours, theirs = socket.socketpair()
    try:
        client._sock = ours
        client._state = _ConnectionState.MQTT_CS_CONNECTED
        props = _filled(Properties).pack()
        topic = b"/a/players/b/fire"
        body = struct.pack("!H", len(topic)) + topic + props + b"{}"
        theirs.send(bytes([0x30, len(body)]) + body)  # QoS 0
        client.loop_read()
        assert len(got) == 1 and got[0].payload == b"{}"
        assert isinstance(got[0].properties, SharedTables)
        read: Any = got[0].properties
        assert read.json() == _filled(Properties).json()
    finally:
        ours.close()
        theirs.close()
        pahofast.install(before)


def test_the_bench_reads_both_kinds_of_packet() -> None:
    for whole in (False, True):
        assert read_us("publish", 50, whole=whole) > 0 and read_us("puback", 50, whole=whole) > 0


def test_will_set_takes_pahos_own_properties_once_installed() -> None:
    """Only the decoder is given SharedTables: paho.mqtt.client checks a
    will's properties against its own class."""
    import salvo.net.link  # noqa: F401 (installs pahofast)

    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    props: Any = Properties(PacketTypes.WILLMESSAGE)  # type: ignore[no-untyped-call]
    props.WillDelayInterval = 5
    client.will_set("/a/game/server", "down", properties=props)
