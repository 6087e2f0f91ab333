"""The batch's transport over MQTT (:class:`salvo.referee.batch.Transport`):
the runner's publishing connection publishes and writes, its subscribing
connection acknowledges (manual QoS 1 acks)."""

from __future__ import annotations

import paho.mqtt.client as paho

from salvo.net.link import Link, acknowledged
from salvo.net.mqtt import Client


class Sent:
    """A message handed to paho; acknowledged once its PUBACK came."""

    __slots__ = ("info",)

    def __init__(self, info: paho.MQTTMessageInfo) -> None:
        self.info = info

    def acknowledged(self) -> bool:
        return acknowledged(self.info)


class MqttTransport:
    """``out`` (driven by ``link``) publishes; ``client`` acknowledges."""

    def __init__(self, out: Client, link: Link, client: Client) -> None:
        self._out = out
        self._link = link
        self._client = client

    def publish(self, topic: str, payload: str | bytes, retain: bool) -> Sent:
        return Sent(self._out.publish(topic, payload, qos=1, retain=retain))

    def write(self) -> None:
        self._link.write_now()

    def ack(self, mid: int, qos: int) -> None:
        self._client.ack(mid, qos)
