"""salvo.net.pahofast.WholePackets: reading a packet whole gives what paho's
own reading gives, byte for byte and return code for return code, for the
common PUBLISH it reads itself and for everything it hands to paho (packets
in pieces, properties, QoS 2, malformed packets, a closed socket)."""

from __future__ import annotations

import contextlib
import copy
import itertools
import select
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, _ConnectionState

from salvo.net import pahofast

TOPIC = b"/arena/players/team-b/fire"
#: a fire message's size
PAYLOAD = b'{"data":{"x":3,"y":9,"turn":1},"signature":"' + b"A" * 88 + b'"}'
NO_PROPERTIES = b"\x00"


def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 127, n >> 7
        out.append(byte | (128 if n else 0))
        if not n:
            return bytes(out)


def packet(command: int, body: bytes) -> bytes:
    return bytes([command]) + _length(len(body)) + body


def publish(
    *,
    topic: bytes = TOPIC,
    payload: bytes = PAYLOAD,
    qos: int = 1,
    mid: int = 7,
    retain: bool = False,
    dup: bool = False,
    properties: bytes | None = NO_PROPERTIES,
) -> bytes:
    """A PUBLISH; ``properties`` None for MQTT 3.1.1 (which has none)."""
    body = struct.pack("!H", len(topic)) + topic + (struct.pack("!H", mid) if qos else b"")
    body += (properties if properties is not None else b"") + payload
    return packet(0x30 | dup << 3 | qos << 1 | retain, body)


def user_property(key: bytes, value: bytes) -> bytes:
    prop = b"\x26" + struct.pack("!H", len(key)) + key + struct.pack("!H", len(value)) + value
    return _length(len(prop)) + prop


@dataclass
class Outcome:
    """What a client made of the bytes it was given."""

    codes: list[MQTTErrorCode] = field(default_factory=list)
    messages: list[tuple[Any, ...]] = field(default_factory=list)
    #: what it sent back (PUBACK, PUBREC)
    sent: bytes = b""
    #: bytes left unread in the socket
    left: int = 0
    #: paho's partial-packet state afterwards
    state: dict[str, Any] = field(default_factory=dict)
    #: messages still awaiting their PUBACK
    in_flight: list[int] = field(default_factory=list)
    #: the keep-alive's clock saw bytes come in
    heard: bool = False
    #: after each read: paho's reading state, and whether the keep-alive's clock moved
    trail: list[tuple[dict[str, Any], bool]] = field(default_factory=list)


@dataclass
class Reader:
    client: pahofast.WholePackets
    ours: socket.socket
    theirs: socket.socket
    outcome: Outcome


def _reader(whole: bool, *, mqtt5: bool, manual_ack: bool) -> Reader:
    client = pahofast.WholePackets(
        CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5 if mqtt5 else paho.MQTTv311, manual_ack=manual_ack
    )
    client.whole_packets = whole
    outcome = Outcome()

    def took(_c: paho.Client, _u: Any, m: paho.MQTTMessage) -> None:
        props = None if m.properties is None else (type(m.properties).__name__, m.properties.json())  # type: ignore[no-untyped-call]
        outcome.messages.append((m._topic, m.payload, m.mid, m.qos, m.retain, m.dup, props))  # (the raw topic)

    client.on_message = took
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    client._sock = ours  # (paho private: a socket of our own, no broker; guarded: test_brokers)
    client._state = _ConnectionState.MQTT_CS_CONNECTED  # (paho private, as above)
    client._out_messages[3] = paho.MQTTMessage(3)  # (paho private: one message in flight, mid 3)
    client._out_messages[3].qos = 1
    client._last_bytes_received = 0.0  # (paho private: the keep-alive's clock; guarded: test_brokers)
    return Reader(client, ours, theirs, outcome)


def _finish(reader: Reader) -> Outcome:
    outcome, client = reader.outcome, reader.client
    try:
        while chunk := reader.theirs.recv(65536):
            outcome.sent += chunk
    except BlockingIOError:
        pass
    if client.socket() is not None:
        try:
            outcome.left = len(reader.ours.recv(1 << 20, socket.MSG_PEEK))
        except BlockingIOError:
            outcome.left = 0
    outcome.state = dict(client._in_packet)  # (paho private, its reading state)
    outcome.in_flight = sorted(client._out_messages)  # (paho private, as above)
    outcome.heard = client._last_bytes_received > 0  # (paho private, as above)
    reader.ours.close()
    reader.theirs.close()
    return outcome


def read(whole: bool, chunks: list[bytes], reads: int = 1, *, mqtt5: bool = True, manual_ack: bool = True) -> Outcome:
    """Each chunk sent, then ``reads`` loop_reads after each."""
    reader = _reader(whole, mqtt5=mqtt5, manual_ack=manual_ack)
    client = reader.client
    for chunk in chunks:
        reader.theirs.send(chunk)
        for _ in range(reads):
            client._last_bytes_received = 0.0
            reader.outcome.codes.append(client.loop_read())
            state = copy.deepcopy(dict(client._in_packet))
            reader.outcome.trail.append((state, client._last_bytes_received > 0))
    return _finish(reader)


@pytest.fixture
def pahos_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often paho's own _packet_read ran (WholePackets calls it for
    whatever it does not read itself)."""
    calls = [0]
    own: Callable[[paho.Client], MQTTErrorCode] = paho.Client._packet_read  # (paho private: counted)

    def counted(self: paho.Client) -> MQTTErrorCode:
        calls[0] += 1
        return own(self)

    monkeypatch.setattr(paho.Client, "_packet_read", counted)
    return calls


def same(chunks: list[bytes], reads: int = 1, **how: bool) -> Outcome:
    """Read both ways; they must agree. What the whole reader made of it."""
    pahos, whole = read(False, chunks, reads, **how), read(True, chunks, reads, **how)
    assert whole == pahos
    return whole


COMMON = {
    "qos1": publish(),
    "qos0": publish(qos=0),
    "retained": publish(retain=True),
    "duplicate": publish(dup=True),
    "empty payload": publish(payload=b""),
    "mid 65535": publish(mid=65535),
    "2-byte length": publish(payload=b"x" * 300),
    "3-byte length": publish(payload=b"x" * 20_000),
    "empty topic": publish(topic=b""),
    "topic not utf-8": publish(topic=b"/a/\xff/fire"),
}


@pytest.mark.parametrize("name", COMMON)
def test_a_common_publish_is_read_whole_as_paho_reads_it(name: str, pahos_reads: list[int]) -> None:
    outcome = same([COMMON[name]])
    assert len(outcome.messages) == 1 and outcome.left == 0
    pahos_reads[0] = 0
    read(True, [COMMON[name]])
    assert pahos_reads[0] == 0  # read whole: paho's reading never ran


def test_on_mqtt_3_too(pahos_reads: list[int]) -> None:
    outcome = same([publish(properties=None)], mqtt5=False)
    assert outcome.messages[0][:2] == (TOPIC, PAYLOAD) and outcome.messages[0][6] is None
    pahos_reads[0] = 0
    read(True, [publish(properties=None)], mqtt5=False)
    assert pahos_reads[0] == 0


def test_without_manual_acks_the_puback_goes_back_as_pahos_does() -> None:
    outcome = same([publish(mid=513)], manual_ack=False)
    assert outcome.sent == bytes([0x40, 2, 2, 1])


HANDED_TO_PAHO = {
    "properties": publish(properties=user_property(b"team", b"alan")),
    "qos2": publish(qos=2),
    "puback": packet(0x40, struct.pack("!H", 3)),
    "puback unknown": packet(0x40, struct.pack("!H", 9)),
    "pingresp": packet(0xD0, b""),
    "qos1 without its id": packet(0x32, struct.pack("!H", 3) + b"/ab"),
    "qos1 with id 0": publish(mid=0),
    "topic past the end": packet(0x32, struct.pack("!H", 200) + b"/a"),
    "qos3": packet(0x36, struct.pack("!H", 2) + b"/a" + b"\x00\x01\x00"),
    "length of 5 bytes": bytes([0x32, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
    "unknown type": packet(0x00, b""),
}


@pytest.mark.parametrize("name", HANDED_TO_PAHO)
def test_the_rest_is_paho_reading_it(name: str, pahos_reads: list[int]) -> None:
    same([HANDED_TO_PAHO[name]], reads=2)
    pahos_reads[0] = 0
    read(True, [HANDED_TO_PAHO[name]])
    assert pahos_reads[0] > 0


def test_a_puback_marks_its_message_published() -> None:
    outcome = same([packet(0x40, struct.pack("!H", 3))])
    assert outcome.in_flight == []


def test_mqtt_3_refuses_an_empty_topic_as_paho_does() -> None:
    outcome = same([publish(topic=b"", properties=None)], mqtt5=False)
    assert outcome.codes == [MQTTErrorCode.MQTT_ERR_PROTOCOL] and not outcome.messages


@pytest.mark.parametrize("cuts", [(1,), (2,), (3,), (1, 2, 3), (4,), (40,), (4, 9000)])
def test_a_packet_in_pieces_is_read_as_paho_reads_it(cuts: tuple[int, ...]) -> None:
    """Cut in the fixed header, after it, in the body: each piece read as it comes."""
    whole = publish(payload=b"y" * 20_000)  # 3 bytes of length
    bounds = [0, *cuts, len(whole)]
    outcome = same([whole[a:b] for a, b in itertools.pairwise(bounds)])
    assert len(outcome.messages) == 1 and outcome.messages[0][1] == b"y" * 20_000


def test_packets_that_came_together_are_read_one_a_call_and_none_is_lost() -> None:
    burst = publish(mid=1) + packet(0x40, struct.pack("!H", 3)) + publish(mid=2, qos=0) + publish(mid=4)
    outcome = same([burst], reads=5)
    assert [m[2] for m in outcome.messages] == [1, 0, 4] and outcome.left == 0


@pytest.mark.parametrize("sent", [0, 1, 10, len(publish())])
def test_a_closed_socket_is_lost_as_paho_says(sent: int) -> None:
    """The other end closed, after nothing, a piece of a packet, or one."""
    seen = []
    for whole in (False, True):
        reader = _reader(whole, mqtt5=True, manual_ack=True)
        reader.theirs.send(publish()[:sent])
        reader.theirs.shutdown(socket.SHUT_WR)
        codes = [reader.client.loop_read() for _ in range(3)]
        assert MQTTErrorCode.MQTT_ERR_CONN_LOST in codes and reader.client.socket() is None
        seen.append((codes, reader.outcome.messages))
        _finish(reader)
    assert seen[0] == seen[1]


@pytest.mark.parametrize("taken", [1, 2, 3, 4, 60])
def test_paho_reads_on_from_any_first_bytes_handed_over(taken: int) -> None:
    """hand_over with the first bytes of a packet (even a fixed header not
    all there): paho's reading goes on from them to the same message."""
    whole = publish(payload=b"z" * 20_000)
    reader = _reader(True, mqtt5=True, manual_ack=True)
    reader.theirs.send(whole[taken:])
    reader.outcome.codes.append(reader.client.hand_over(whole[:taken]))
    reader.outcome.codes.append(reader.client.loop_read())
    outcome, expected = _finish(reader), same([whole], reads=2)
    assert (outcome.codes, outcome.messages, outcome.sent, outcome.left, outcome.state, outcome.in_flight) == (
        expected.codes,
        expected.messages,
        expected.sent,
        expected.left,
        expected.state,
        expected.in_flight,
    )


def test_off_it_is_pahos_own_reading(pahos_reads: list[int]) -> None:
    read(False, [publish()])
    assert pahos_reads[0] == 1


def test_nothing_to_read_is_pahos_again() -> None:
    for whole in (False, True):
        reader = _reader(whole, mqtt5=True, manual_ack=True)
        assert reader.client._packet_read() == MQTTErrorCode.MQTT_ERR_AGAIN  # (paho private: one read)
        _finish(reader)


@pytest.mark.parametrize("length", [0, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**28 - 1])
def test_every_length_of_fixed_header_is_read(length: int) -> None:
    header = bytes([0x32]) + _length(length)
    assert pahofast.fixed_header(header + b"rest") == (len(header), length)
    assert pahofast.fixed_header(header[:-1]) is None  # not all there yet


def test_a_length_of_more_than_4_bytes_is_malformed() -> None:
    assert pahofast.fixed_header(bytes([0x32, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F])) is None


def test_a_message_read_whole_is_a_paho_message_with_its_info_made_when_asked() -> None:
    reader = _reader(True, mqtt5=True, manual_ack=True)
    got: list[paho.MQTTMessage] = []
    reader.client.on_message = lambda _c, _u, m: got.append(m)
    reader.theirs.send(publish(mid=42) + publish(topic=b"/a/\xff", mid=43))
    reader.client.loop_read()
    reader.client.loop_read()
    _finish(reader)
    message = got[0]
    assert isinstance(message, pahofast.LeanMessage) and isinstance(message, paho.MQTTMessage)
    assert message.topic == TOPIC.decode() and message.timestamp > 0 and message.state == paho.mqtt_ms_invalid
    info = message.info
    assert isinstance(info, paho.MQTTMessageInfo) and info.mid == 42 and message.info is info
    message.info = paho.MQTTMessageInfo(5)
    assert message.info.mid == 5
    with pytest.raises(UnicodeDecodeError):  # as paho's own: the raw bytes stay in _topic
        _ = got[1].topic


def _handled(whole: bool, how: str) -> tuple[list[tuple[str, object]], list[MQTTErrorCode]]:
    """Two messages read by a client set up ``how``: what its callbacks saw
    (and what loop_read raised), and the return codes."""
    reader = _reader(whole, mqtt5=True, manual_ack=True)
    client = reader.client
    calls: list[tuple[str, object]] = []
    if how == "filtered":
        client.message_callback_add("/arena/players/+/fire", lambda _c, _u, m: calls.append(("filter", m.mid)))
        client.on_message = lambda _c, _u, m: calls.append(("all", m.mid))
    else:

        def fails(_c: paho.Client, _u: Any, m: paho.MQTTMessage) -> None:
            calls.append(("failed", m.mid))
            raise ValueError("a callback's bug")

        client.on_message = fails
        client.suppress_exceptions = how == "suppressed"
        if how == "logged":
            client.enable_logger()
        if how == "on_log":
            client.on_log = lambda _c, _u, _level, text: calls.append(("log", text.split(":")[0]))
    reader.theirs.send(publish(mid=11) + publish(topic=b"/elsewhere", mid=12))
    for _ in range(2):
        try:
            reader.outcome.codes.append(client.loop_read())
        except ValueError as exc:
            calls.append(("raised", str(exc)))
    _finish(reader)
    return calls, reader.outcome.codes


@pytest.mark.parametrize("how", ["filtered", "suppressed", "logged", "on_log", "raises"])
def test_what_pahos_message_handling_does_beyond_on_message_is_kept(how: str) -> None:
    """Filters, swallowed exceptions, paho's logging: each as paho's own
    reading does it; a raising callback with none of them is the one
    difference (the next test)."""
    pahos, whole = _handled(False, how), _handled(True, how)
    assert pahos[0]
    if how == "raises":  # paho's reading hands message 11 again; read whole, 12 comes next
        raised = ("raised", "a callback's bug")
        assert pahos[0] == [("failed", 11), raised, ("failed", 11), raised]
        assert whole[0] == [("failed", 11), raised, ("failed", 12), raised]
    else:
        assert whole == pahos


def test_an_mqtt_3_qos_0_topic_past_the_end_is_refused_as_paho_does() -> None:
    """(At QoS 0 on MQTT 3.1.1 only the length check stands between a
    topic longer than its packet and a message cut short.)"""
    outcome = same([packet(0x30, struct.pack("!H", 200) + b"/a/b")], reads=2, mqtt5=False)
    assert outcome.codes[0] == MQTTErrorCode.MQTT_ERR_PROTOCOL and not outcome.messages


def test_after_a_packet_of_type_0_in_pieces_the_rest_is_pahos() -> None:
    """paho keeps a packet of type 0 as command 0 with its length read:
    what follows is that packet's body, not a packet of its own."""
    inner = publish(topic=b"/x", payload=b"hi", qos=0, properties=None)
    bogus = packet(0x00, inner)
    header = len(bogus) - len(inner)
    outcome = same([bogus[:header], bogus[header:]], mqtt5=False)
    assert not outcome.messages


def test_a_reset_connection_is_lost_and_logged_as_paho_does() -> None:
    """The peek takes the socket's error (ECONNRESET): it is said as paho's
    own first recv says it, not found as a mere end."""
    seen = []
    for whole in (False, True):
        reader = _reader(whole, mqtt5=True, manual_ack=True)
        listener = socket.create_server(("127.0.0.1", 0))
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
        listener.close()
        ours.setblocking(False)
        reader.client._sock = ours
        logs: list[str] = []
        reader.client.on_log = lambda _c, _u, _level, text, logs=logs: logs.append(text)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        theirs.close()  # an RST
        select.select([ours], [], [], 5)
        codes = [reader.client.loop_read()]
        seen.append((codes, [line for line in logs if "socket" in line]))
        reader.ours.close()
        reader.theirs.close()
        ours.close()
    assert seen[0][0] == [MQTTErrorCode.MQTT_ERR_CONN_LOST] and "Connection reset" in seen[0][1][0]
    assert seen[1] == seen[0]


def test_with_automatic_acks_a_message_whose_callback_raised_is_acknowledged_once() -> None:
    """paho's own reading hands it again and acks it once the callback
    succeeds; read whole, it was taken, and acked as it went up."""
    sent = []
    for whole in (False, True):
        reader = _reader(whole, mqtt5=True, manual_ack=False)
        failed: list[bool] = []

        def once(_c: paho.Client, _u: Any, _m: paho.MQTTMessage, failed: list[bool] = failed) -> None:
            if not failed:
                failed.append(True)
                raise ValueError("a callback's bug, once")

        reader.client.on_message = once
        reader.theirs.send(publish(mid=11))
        for _ in range(2):
            with contextlib.suppress(ValueError):
                reader.client.loop_read()
        sent.append(_finish(reader).sent)
    assert sent[0] == bytes([0x40, 2, 0, 11]) and sent[1] == sent[0]
