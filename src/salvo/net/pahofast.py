"""paho's own speed-ups, in one place, each with its measured reason.

**Shared tables.** paho makes a ``Properties`` object for every PUBLISH it
reads on MQTT 5, and one for every PUBACK (on 3.1.1 too), and each makes its
three constant tables anew: the 7 type names, the 27 property names and the
27 property kinds (27 ``list.index`` calls); reading one, it first clears
it, name by name (27 ``replace`` and ``hasattr`` calls). :class:`SharedTables`
takes the tables paho made once (so they are always paho's own), and shares
them (nothing in paho writes to them after ``__init__``), and clears by what
the object holds. ``salvo bench --only paho`` (2026-11-27, three runs):
``loop_read`` of one QoS 1 PUBLISH on MQTT 5 18.7-19.0 -> 10.9-11.0 us, of
one PUBACK 14.6-14.7 -> 9.4 us; a fire's PUBLISH is on its way to its hit,
and most shots bring a PUBACK too.

Installed by :mod:`salvo.net.link` (the referee's connections and what
shares its loop) into the module where paho decodes packets, the only one
on those paths: ``paho.mqtt.client`` keeps paho's own class, which its
``will_set`` checks arguments against, and makes its own for CONNACK,
DISCONNECT and a QoS 0 ``on_publish``.

**Whole packets.** paho reads a packet with a ``recv`` for its first byte,
one for each byte of its length and one for the rest (four for a fire
message), through a dictionary of partial state; decodes a PUBLISH with
format strings made per call; makes each message an ``MQTTMessageInfo``
(a ``threading.Condition`` inside) that only a message it sends needs; and
matches every topic against callback filters nobody added.
:class:`WholePackets` peeks at the fixed header, takes the packet with one
``recv``, and reads the common PUBLISH (QoS 0 or 1, no properties) itself
into a :class:`LeanMessage`, handed to ``on_message`` as paho hands it;
everything else (a packet not all there yet, TLS, websocket, properties,
QoS 2, anything malformed, a client with filters, paho's logging or
swallowed exceptions) goes to paho's own code, in the state paho's own
reading would have left. One difference, on purpose: a message whose
``on_message`` raised is taken, and with automatic acks acknowledged
(paho's own reading hands it again at the next read, for as long as it
raises, and reads nothing after it). Links (:mod:`salvo.net.link`) switch it on.
``salvo bench --only paho`` (2026-11-28): ``loop_read`` of one QoS 1
PUBLISH 10.9-11.0 -> 4.5 us (a PUBACK's stays 9.1-9.5 us: its handling is
paho's); ``salvo bench --only e2e`` RTT ratio median 1.32 -> 1.24
(docs/performance.md). ``tests/test_wholepackets.py`` reads every kind of
packet both ways and compares.

The bench's echo peer, the bare paho client the referee is compared with,
uses neither (so the ratio of ``salvo bench --only e2e`` is the referee
with them against paho without).
"""

from __future__ import annotations

import socket
from typing import Any, Final

import paho.mqtt._packet as paho_packet  # paho private (since paho 2.2, pinned; guarded: test_brokers)
import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

_PAHOS: Any = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
#: where paho decodes packets (PUBLISH, PUBACK and the rest)
_DECODER: Any = paho_packet


#: the attribute names paho gives properties (its names without spaces)
_ATTRIBUTES: frozenset[str] = frozenset(name.replace(" ", "") for name in _PAHOS.names)


class SharedTables(Properties):
    """paho's ``Properties``, its constant tables made once."""

    types = _PAHOS.types
    names = _PAHOS.names
    properties = _PAHOS.properties

    def __init__(self, packetType: int) -> None:
        object.__setattr__(self, "packetType", packetType)

    def clear(self) -> None:
        """paho's own, without its 27 ``replace`` and ``hasattr`` calls:
        ``unpack`` clears every object it fills, new ones too."""
        held = self.__dict__
        for name in [name for name in held if name in _ATTRIBUTES]:
            del held[name]


def install(made: type[Properties] = SharedTables) -> type[Properties]:
    """From here on paho makes ``made`` (idempotent); the class it made
    before (``salvo bench --only paho`` puts paho's own back for a while)."""
    before: type[Properties] = _DECODER.Properties
    _DECODER.Properties = made
    return before


# -- whole packets -----------------------------------------------------------------------

#: a fixed header is at most 5 bytes: the packet's type and 1-4 of length
_HEADER_MAX: Final = 5
_PUBLISH: Final = 0x30
_AGAIN: Final = MQTTErrorCode.MQTT_ERR_AGAIN
_SUCCESS: Final = MQTTErrorCode.MQTT_ERR_SUCCESS


def fixed_header(data: bytes) -> tuple[int, int] | None:
    """A packet's fixed header at the start of ``data``: (its size, the
    remaining length it gives); None when it is not all there, or is
    malformed (more than 4 bytes of length)."""
    length = 0
    for i in range(1, min(len(data), _HEADER_MAX)):
        byte = data[i]
        length |= (byte & 127) << (7 * (i - 1))
        if byte < 128:
            return i + 1, length
    return None


#: the slot paho's MQTTMessage keeps its MQTTMessageInfo in
_INFO: Any = vars(paho.MQTTMessage)["info"]


class LeanMessage(paho.MQTTMessage):
    """A received message, as paho's own but for its ``info`` (a
    ``threading.Condition`` inside, for what paho tracks of a message it
    sends), made only when asked for."""

    __slots__ = ()

    def __init__(
        self, mid: int, topic: bytes, payload: bytes, qos: int, retain: bool, dup: bool, properties: Properties | None
    ) -> None:
        self.timestamp = paho.time_func()
        self.state = paho.mqtt_ms_invalid
        self.dup = dup
        self.mid = mid
        self._topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties

    @property
    def info(self) -> paho.MQTTMessageInfo:
        try:
            held: paho.MQTTMessageInfo = _INFO.__get__(self)
        except AttributeError:
            held = paho.MQTTMessageInfo(self.mid)
            _INFO.__set__(self, held)
        return held

    @info.setter
    def info(self, value: paho.MQTTMessageInfo) -> None:
        _INFO.__set__(self, value)


class WholePackets(paho.Client):
    """A paho client that reads a packet whole when it can (see the module's
    docstring); ``whole_packets`` switches it on (off, it is paho's own)."""

    #: read whole packets (a link sets it: its loop's thread does the reading)
    whole_packets = False
    #: message_callback_add was called: messages go through paho's matching
    _filtered = False

    def _packet_read(self) -> MQTTErrorCode:
        sock = self._sock  # paho private (guarded: test_brokers)
        state = self._in_packet  # paho private (guarded: test_brokers)
        if not self.whole_packets or type(sock) is not socket.socket or state["command"] or state["have_remaining"]:
            # off; TLS or a websocket (which hold bytes of their own); or a
            # packet paho has begun to read (one of type 0 leaves command 0)
            return super()._packet_read()  # paho private (guarded: test_brokers)
        try:
            head = sock.recv(_HEADER_MAX, socket.MSG_PEEK)
        except BlockingIOError:
            return _AGAIN
        except OSError as exc:
            return self._lost(exc)
        found = fixed_header(head)
        if found is None or head[0] < 0x10:
            # closed, a header not all there yet, malformed, or of type 0 (which
            # paho's state takes for "none yet"): as paho reads them
            return super()._packet_read()  # paho private (guarded: test_brokers)
        header, length = found
        try:
            data = sock.recv(header + length)
        except OSError as exc:  # (and nothing was taken)
            return self._lost(exc)
        if len(data) == header + length and data[0] & 0xF0 == _PUBLISH:
            done = self._publish(data, header)
            if done is not None:
                return done
        return self.hand_over(data)

    def _lost(self, exc: OSError) -> MQTTErrorCode:
        """The connection failed: said as paho's own first ``recv`` says it
        (the error is the peek's now: paho's would find only the end)."""
        what = "timeout on socket" if isinstance(exc, TimeoutError) else "failed to receive on socket"
        self._easy_log(paho.MQTT_LOG_ERR, f"{what}: %s", exc)  # paho private (guarded: test_brokers)
        return MQTTErrorCode.MQTT_ERR_CONN_LOST

    def _publish(self, data: bytes, start: int) -> MQTTErrorCode | None:
        """A whole PUBLISH at QoS 0 or 1 without properties (its body from
        ``start``) to ``on_message``, as paho's own reading hands it over;
        None, having done nothing, for anything else (for paho to read)."""
        command, end = data[0], len(data)
        qos = (command & 6) >> 1
        if qos > 1 or start + 2 > end or self.logger is not None or self.on_log is not None:
            return None  # (paho's own reading logs each message it reads)
        at = start + 2 + (data[start] << 8 | data[start + 1])  # after the topic
        topic = data[start + 2 : at]
        mid = 0
        if qos:
            mid = data[at] << 8 | data[at + 1] if at + 2 <= end else 0
            at += 2
        properties = None
        if self._protocol == paho.MQTTv5:  # paho private (guarded: test_brokers)
            if at >= end or data[at]:
                return None  # properties (a topic alias, a team's user properties), or malformed
            properties = _DECODER.Properties(PacketTypes.PUBLISH)
            at += 1
        elif not topic:
            return None  # MQTT 3.1.1 has no empty topic: paho refuses it
        if at > end or (qos and not mid):
            return None  # cut short, or a QoS 1 without its id: malformed
        message = LeanMessage(mid, topic, data[at:], qos, bool(command & 1), bool(command & 8), properties)
        with self._msgtime_mutex:  # paho private (guarded: test_brokers)
            self._last_bytes_received = message.timestamp  # paho private (guarded: test_brokers)
        on_message = self.on_message
        if self._filtered or self.suppress_exceptions:
            self._handle_on_message(message)  # paho private (guarded: test_brokers)
        elif on_message is not None:
            # paho's own _handle_on_message, less what it does for filters and
            # swallowed exceptions, neither in use. What on_message raises
            # goes up with the message taken (and, with automatic acks,
            # acknowledged): paho's own reading would hand the same message
            # again at the next read, for as long as it raises.
            try:
                with self._in_callback_mutex:  # paho private (guarded: test_brokers)
                    on_message(self, self._userdata, message)  # paho private (guarded: test_brokers)
            except Exception:
                if qos and not self._manual_ack:  # paho private (guarded: test_brokers)
                    self._send_puback(mid)  # paho private (guarded: test_brokers)
                raise
        if qos and not self._manual_ack:  # paho private (guarded: test_brokers)
            return self._send_puback(mid)  # paho private (guarded: test_brokers)
        return _SUCCESS

    def message_callback_add(self, sub: str, callback: paho.CallbackOnMessage) -> None:
        self._filtered = True  # (for good: paho's matcher has no public count)
        super().message_callback_add(sub, callback)

    def hand_over(self, data: bytes) -> MQTTErrorCode:
        """The first bytes of a packet (of a type other than 0), taken from
        the socket: paho's own reading goes on from them, in the state its
        reading would have left."""
        state = self._in_packet  # paho private (guarded: test_brokers)
        state["command"] = data[0]
        found = fixed_header(data)
        if found is None:  # the length not all there (paho reads on, byte by byte)
            count = list(data[1:_HEADER_MAX])
            state["remaining_length"] = sum((byte & 127) << (7 * k) for k, byte in enumerate(count))
        else:
            header, length = found
            count = list(data[1:header])
            state["remaining_length"] = length
            state["have_remaining"] = 1
            state["packet"] = bytearray(data[header:])
            state["to_process"] = length - (len(data) - header)
            if header < len(data) < header + length:  # (paho's clock counts each piece of a body)
                with self._msgtime_mutex:  # paho private (guarded: test_brokers)
                    self._last_bytes_received = paho.time_func()  # paho private (guarded: test_brokers)
        state["remaining_count"] = count
        state["remaining_mult"] = 128 ** len(count)
        return super()._packet_read()  # paho private (guarded: test_brokers)
