"""One speed-up of paho's own, in one place, with its measured reason.

paho makes a ``Properties`` object for every PUBLISH it reads on MQTT 5,
and one for every PUBACK (on 3.1.1 too), and each makes its three constant
tables anew: the 7 type names, the 27 property names and the 27 property
kinds (27 ``list.index`` calls); reading one, it first clears it, name by
name (27 ``replace`` and ``hasattr`` calls). :class:`SharedTables` takes
the tables paho made once (so they are always paho's own), and shares them
(nothing in paho writes to them after ``__init__``), and clears by what
the object holds. ``salvo bench --only paho``
(2026-11-27, three runs): ``loop_read`` of one QoS 1 PUBLISH on MQTT 5
18.7-19.0 -> 10.9-11.0 us, of one PUBACK 14.6-14.7 -> 9.4 us; a fire's
PUBLISH is on its way to its hit, and most shots bring a PUBACK too.

Installed by :mod:`salvo.net.link` (the referee's connections and what
shares its loop) into the module where paho decodes packets, the only one
on those paths: ``paho.mqtt.client`` keeps paho's own class, which its
``will_set`` checks arguments against, and makes its own for CONNACK,
DISCONNECT and a QoS 0 ``on_publish``. The bench's echo peer, the bare paho
client the referee is compared with, does not import it (so the ratio of
``salvo bench --only e2e`` is the referee with it against paho without).
"""

from __future__ import annotations

from typing import Any

import paho.mqtt._packet as paho_packet  # paho private (since paho 2.2, pinned; guarded: test_brokers)
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
