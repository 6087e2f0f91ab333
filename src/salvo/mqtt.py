"""paho-mqtt 2.x set-up shared by the referee, the SDK and the tools.

Broker addresses are URLs: ``mqtt://[user[:password]@]host[:port]``, also
``mqtts://`` (TLS), ``ws://``/``wss://`` (websockets; the path is kept).
MQTT 5 is spoken by default; ``?protocol=3`` selects 3.1.1 for brokers
without MQTT 5 (the demo's embedded amqtt broker, for one).

TLS verifies the broker's certificate, against the system's CAs or, with
``ca_file`` (``salvo tls`` makes one for a venue), against that CA only.
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from dataclasses import dataclass, replace
from typing import Any, Literal

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

_DEFAULT_PORTS = {"mqtt": 1883, "tcp": 1883, "mqtts": 8883, "ssl": 8883, "ws": 9001, "wss": 443}


@dataclass(frozen=True)
class Broker:
    host: str = "localhost"
    port: int = 1883
    username: str | None = None
    password: str | None = None
    transport: Literal["tcp", "websockets"] = "tcp"
    tls: bool = False
    path: str = "/"
    mqtt5: bool = True
    #: PEM file of the CA that signed the broker's certificate (TLS only)
    ca_file: str | None = None

    @classmethod
    def from_url(cls, url: str) -> Broker:
        """Parse a broker URL; raise ValueError with a readable reason."""
        parts = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"unsupported broker URL scheme {scheme!r}: use mqtt://, mqtts://, ws:// or wss://")
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise ValueError(f"bad port in broker URL {url!r}") from exc
        query = urllib.parse.parse_qs(parts.query)
        version = query.get("protocol", ["5"])[-1]
        if version not in ("3", "3.1.1", "5"):
            raise ValueError(f"unsupported MQTT protocol {version!r}: use ?protocol=5 or ?protocol=3")
        return cls(
            host=parts.hostname or "localhost",
            port=port,
            username=urllib.parse.unquote(parts.username) if parts.username else None,
            password=urllib.parse.unquote(parts.password) if parts.password else None,
            transport="websockets" if scheme in ("ws", "wss") else "tcp",
            tls=scheme in ("mqtts", "ssl", "wss"),
            path=parts.path or "/",
            mqtt5=version == "5",
        )

    def with_credentials(self, username: str | None, password: str | None) -> Broker:
        """These credentials where given, the URL's otherwise."""
        return replace(self, username=username or self.username, password=password or self.password)

    def with_ca_file(self, ca_file: str | None) -> Broker:
        """Verify the broker's certificate against this CA (when given)."""
        return replace(self, ca_file=ca_file) if ca_file else self

    @property
    def url(self) -> str:
        """The URL without the password, for logs."""
        scheme = {("tcp", False): "mqtt", ("tcp", True): "mqtts", ("websockets", False): "ws"}.get(
            (self.transport, self.tls), "wss"
        )
        user = f"{self.username}@" if self.username else ""
        path = self.path if self.transport == "websockets" and self.path != "/" else ""
        query = "" if self.mqtt5 else "?protocol=3"
        return f"{scheme}://{user}{self.host}:{self.port}{path}{query}"


def new_client(
    broker: Broker,
    client_id: str = "",
    *,
    manual_ack: bool = False,
    will: tuple[str, str] | None = None,
    persistent: bool = False,
) -> paho.Client:
    """A paho client with VERSION2 callbacks, credentials, TLS and a retained
    last will (topic, payload) set up; not yet connected. ``persistent``
    keeps the session on a 3.1.1 broker (MQTT 5: see :func:`connect_async`)."""
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=paho.MQTTv5 if broker.mqtt5 else paho.MQTTv311,
        transport=broker.transport,
        manual_ack=manual_ack,
        clean_session=None if broker.mqtt5 else not persistent,
    )
    if broker.transport == "websockets":
        client.ws_set_options(path=broker.path)
    if broker.tls:
        client.tls_set_context(ssl.create_default_context(cafile=broker.ca_file))
    if broker.username is not None:
        client.username_pw_set(broker.username, broker.password)
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True)
    client.reconnect_delay_set(min_delay=1, max_delay=30)
    client.on_socket_open = _no_delay
    return client


def _no_delay(_client: paho.Client, _userdata: Any, sock: Any) -> None:
    # A salvo is a burst of small messages, each waiting for its PUBACK:
    # Nagle's algorithm would hold them back for the peer's delayed ACK.
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def connect_async(client: paho.Client, broker: Broker, *, keepalive: int = 30, session_expiry_s: int = 0) -> None:
    """Start connecting (paho retries in the background after loop_start).
    ``session_expiry_s`` > 0 asks an MQTT 5 broker to keep our session
    (subscriptions, queued QoS 1 messages) that long after a disconnect."""
    if not broker.mqtt5:
        client.connect_async(broker.host, broker.port, keepalive=keepalive)
        return
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    if session_expiry_s:
        props.SessionExpiryInterval = session_expiry_s
    client.connect_async(
        broker.host, broker.port, keepalive=keepalive, clean_start=not session_expiry_s, properties=props
    )
