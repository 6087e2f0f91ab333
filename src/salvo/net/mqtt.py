"""paho-mqtt 2.x set-up shared by the referee, the SDK and the tools.

Broker addresses are URLs: ``mqtt://[user[:password]@]host[:port]``, also
``mqtts://`` (TLS), ``ws://``/``wss://`` (websockets; the path is kept).
Several URLs separated by commas are the nodes of one cluster: a client
connects to the first and, whenever a connection attempt fails or an
established connection is lost, tries the next one (:class:`Client`).

MQTT 5 is spoken by default. A broker that answers a CONNECT with
"unsupported protocol version" (NATS, an MQTT 3.1.1-only mosquitto) gets
MQTT 3.1.1 from the next attempt on, with the same session (:class:`Client`);
``?protocol=3`` asks for 3.1.1 from the start.

TLS verifies the broker's certificate, against the system's CAs or, with
``ca_file`` (``salvo tls`` makes one for a venue), against that CA only.

A client given a :class:`Backoff` waits between its attempts as that says
(capped, jittered) and logs each retry on one line with its reason: a
broker out of reach, a lost connection, or a refused login.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from salvo.net import pahofast

log = logging.getLogger("salvo.net.mqtt")

_DEFAULT_PORTS = {"mqtt": 1883, "tcp": 1883, "mqtts": 8883, "ssl": 8883, "ws": 9001, "wss": 443}

#: CONNACK: the broker does not speak the protocol version we asked for
#: (an MQTT 3.1.1 broker's return code 1 reads as this reason in MQTT 5).
UNSUPPORTED_PROTOCOL: Final = ReasonCode(PacketTypes.CONNACK, "Unsupported protocol version").value


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
    #: the other nodes of a cluster, (host, port), tried in turn after ``host``
    others: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_url(cls, url: str) -> Broker:
        """Parse a broker URL, or several separated by commas (the nodes of
        one cluster: same scheme, protocol and path; one login, given in
        any of them); raise ValueError with a readable reason."""
        # A comma starts another node only before "scheme://": a password
        # may hold commas (and every node's URL names its scheme).
        parts = [part.strip() for part in _NODES.split(url)]
        if not all(parts):
            raise ValueError(f"empty broker URL in {_redacted(url)!r}")
        first, *rest = (cls._one(part) for part in parts)
        for other in rest:
            if _shape(other) != _shape(first):
                raise ValueError(
                    f"the brokers of a cluster share scheme, path and protocol: {other.url} differs from {first.url}"
                )
        logins = {(b.username, b.password) for b in (first, *rest) if b.username is not None}
        if len(logins) > 1:
            raise ValueError("the brokers of a cluster share one login: give it once")
        others = tuple((b.host, b.port) for b in rest)
        if len({(first.host, first.port), *others}) != 1 + len(others):
            raise ValueError(f"a broker is listed twice in {_redacted(url)!r}")
        username, password = logins.pop() if logins else (None, None)
        return replace(first, others=others, username=username, password=password)

    @classmethod
    def _one(cls, url: str) -> Broker:
        parts = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"unsupported broker URL scheme {scheme!r}: use mqtt://, mqtts://, ws:// or wss://")
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise ValueError(f"bad port in broker URL {_redacted(url)!r}") from exc
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
    def endpoints(self) -> tuple[tuple[str, int], ...]:
        """Every node, (host, port), in the order they are tried."""
        return ((self.host, self.port), *self.others)

    @property
    def url(self) -> str:
        """The URL (the nodes' URLs, comma-separated) without the password, for logs."""
        scheme = {("tcp", False): "mqtt", ("tcp", True): "mqtts", ("websockets", False): "ws"}.get(
            (self.transport, self.tls), "wss"
        )
        user = f"{self.username}@" if self.username else ""
        path = self.path if self.transport == "websockets" and self.path != "/" else ""
        query = "" if self.mqtt5 else "?protocol=3"
        first = f"{scheme}://{user}{_host(self.host)}:{self.port}{path}{query}"
        return ",".join([first, *(f"{scheme}://{_host(h)}:{p}{path}{query}" for h, p in self.others)])


#: Where one node's URL ends and the next begins: a comma before "scheme://".
_NODES: Final = re.compile(r",(?=\s*[A-Za-z][A-Za-z0-9+.-]*://)")


def _redacted(url: str) -> str:
    """``url`` without the password of any node, for an error message."""
    return re.sub(r"://([^:@/]*):[^@/]*@", r"://\1:***@", url)


def _shape(broker: Broker) -> tuple[object, ...]:
    return broker.transport, broker.tls, broker.path, broker.mqtt5


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass
class Backoff:
    """The waits between connection attempts: ``first`` seconds, doubling up
    to ``cap``, each jittered down to as little as half (clients that lost
    the same broker do not all come back in the same instant). A connection
    the broker accepted starts it from the beginning again."""

    first: float = 1.0
    cap: float = 30.0
    _delay: float = field(default=0.0, repr=False)

    def next(self) -> float:
        """The next wait, in seconds."""
        self._delay = min(max(self.first, self._delay * 2), self.cap)
        return self._delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._delay = 0.0


#: The brokers (their endpoints) that refused MQTT 5 to a client of this process.
_REFUSED_MQTT5: set[tuple[tuple[str, int], ...]] = set()


class Client(pahofast.WholePackets):
    """paho's client, and what a cluster of brokers asks of it:

    * every connection attempt after the first goes to the next of the
      broker's endpoints (a lost connection most likely lost its node; the
      session lives in the cluster, so any node resumes it);
    * a broker that refuses MQTT 5 ("unsupported protocol version") is
      spoken to in MQTT 3.1.1 from the next attempt on, keeping the session
      persistent if it was (``clean_session=False``).

    Whoever reads the protocol after connecting asks :attr:`mqtt5`, not the
    Broker (which says what was asked for).

    With a :attr:`backoff`, the network thread of ``loop_start`` waits
    between attempts as it says, logs every retry with its reason, and stops
    waiting at once when the client is disconnected or its loop stopped."""

    def __init__(self, broker: Broker, client_id: str, *, manual_ack: bool, persistent: bool) -> None:
        # A broker that refused MQTT 5 to another client of this process is
        # spoken to in 3.1.1 at once (a bot process opens many clients).
        mqtt5 = broker.mqtt5 and broker.endpoints not in _REFUSED_MQTT5
        super().__init__(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=paho.MQTTv5 if mqtt5 else paho.MQTTv311,
            transport=broker.transport,
            manual_ack=manual_ack,
            clean_session=None if mqtt5 else not persistent,
        )
        self.endpoints = broker.endpoints
        self.persistent = persistent
        self._node = 0  # connect()/connect_async() name the first endpoint
        self._tried = False
        self._same_again = False
        self._user_on_connect: Any = None
        self._user_on_disconnect: Any = None
        self._quiet_disconnect = False
        self.on_pre_connect = self._pick_endpoint
        #: how long to wait between attempts (None: paho's own doubling, unlogged)
        self.backoff: Backoff | None = None
        self.login = broker.username
        self._up = False  # the broker accepted the current connection
        self._why = ""  # why the latest attempt failed or the connection ended
        self._refused = False  # ... and it was the broker refusing the login
        self._at_once = False  # the next attempt needs no wait (a protocol fall-back)
        self._halt = threading.Event()  # disconnect() or loop_stop(): no more waiting
        self._handed: Any = None  # connect_on's socket, for reconnect() to take
        #: the owner connects through begin_attempt/open_socket/connect_on
        #: (salvo.net.link): paho's own reconnects are turned into closes
        self.attempts_by_owner = False

    @property
    def mqtt5(self) -> bool:
        """This connection speaks MQTT 5 (false once a broker refused it)."""
        return self.protocol == paho.MQTTv5

    @property
    def endpoint(self) -> tuple[str, int]:
        """The node of the latest connection attempt."""
        return self._host, self._port  # paho private

    # paho reads on_connect when a CONNACK arrives, and on_disconnect when the
    # socket closes: ours look first, and keep a fall-back to themselves.
    @property
    def on_connect(self) -> Any:
        return self._negotiate

    @on_connect.setter
    def on_connect(self, func: Any) -> None:
        self._user_on_connect = func

    @property
    def on_disconnect(self) -> Any:
        return self._disconnected

    @on_disconnect.setter
    def on_disconnect(self, func: Any) -> None:
        self._user_on_disconnect = func

    def _negotiate(self, client: paho.Client, userdata: Any, flags: Any, rc: ReasonCode, props: Any) -> None:
        if self._fell_back(rc):
            self._quiet_disconnect = True  # the close that follows is no outage either
            return
        if rc.is_failure:
            self._why = f"the broker at {self._where()} refused the login {self.login or 'anonymous'!r}: {rc}"
            self._refused = True
        else:
            self._up = True
            if self.backoff is not None:
                self.backoff.reset()
        if self._user_on_connect is not None:
            self._user_on_connect(client, userdata, flags, rc, props)

    def _disconnected(self, client: paho.Client, userdata: Any, flags: Any, rc: ReasonCode, props: Any) -> None:
        if self._up:
            self._why = f"lost the connection to the broker at {self._where()} ({rc})"
        elif not self._why:
            self._why = f"the broker at {self._where()} closed the connection before accepting it ({rc})"
        self._up = False
        if self._quiet_disconnect:
            self._quiet_disconnect = False
        elif self._user_on_disconnect is not None:
            self._user_on_disconnect(client, userdata, flags, rc, props)

    def _where(self) -> str:
        host, port = self.endpoint
        return f"{_host(host)}:{port}"

    def reconnect(self) -> MQTTErrorCode:
        if self.attempts_by_owner and self._handed is None:
            # paho itself reconnects at once from inside loop_read after some
            # refusals (it steps down from 3.1.1 to 3.1, or makes up a client
            # id): a blocking connect on the owner's thread. Instead paho closes
            # the socket (the error below) and the owner's next attempt goes to
            # the same node with what paho changed; it is no outage.
            self._same_again = True
            self._quiet_disconnect = True
            return MQTTErrorCode.MQTT_ERR_CONN_REFUSED
        self._why, self._refused = "", False
        try:
            return super().reconnect()
        except OSError as exc:
            self._why = f"cannot reach the broker at {self._where()}: {exc.strerror or exc}"
            raise

    def disconnect(self, reasoncode: ReasonCode | None = None, properties: Properties | None = None) -> MQTTErrorCode:
        self._halt.set()
        return super().disconnect(reasoncode, properties)

    def loop_start(self) -> MQTTErrorCode:
        self._halt.clear()
        return super().loop_start()

    def loop_stop(self) -> MQTTErrorCode:
        self._halt.set()
        return super().loop_stop()

    def _reconnect_wait(self) -> None:
        # paho's network thread (loop_start) calls this before every attempt
        # after a failed one and after a lost connection.
        if self.backoff is None:
            super()._reconnect_wait()
            return
        if self._at_once:  # the same broker again in another protocol: no outage
            self._at_once = False
            return
        delay = self.backoff.next()
        why = self._why or f"cannot reach the broker at {self._where()}"
        # A refused login is the organiser's to fix (the password file, then
        # SIGHUP); until then every retry says so.
        log.log(logging.ERROR if self._refused else logging.WARNING, "%s; retrying in %.1f s", why, delay)
        self._halt.wait(delay)

    def _fell_back(self, rc: ReasonCode) -> bool:
        """A refusal of MQTT 5: speak 3.1.1 from the next attempt on (paho
        itself steps down from 3.1.1 to 3.1 the same way, by setting the
        protocol it connects with). The owner is not told: the retry is
        paho's (or the loop's) usual reconnect."""
        if rc.value != UNSUPPORTED_PROTOCOL or self._protocol != paho.MQTTv5:  # paho private
            return False
        log.info("broker %s:%d refuses MQTT 5: speaking MQTT 3.1.1 to it", *self.endpoint)
        _REFUSED_MQTT5.add(self.endpoints)
        self._speak_311()
        self._same_again = True  # the same node again, in the protocol it speaks
        self._reconnect_delay = None  # paho private; after paho's shortest wait: it answered, it is no outage
        self._at_once = True  # (or at once, with a back-off of ours)
        return True

    def next_session(self, *, clean: bool) -> None:
        """The next connection starts a clean session (or, ``clean`` False on
        MQTT 3.1.1, a persistent one again); paho has no public setter for
        these once connect_async ran."""
        self._clean_start = paho.MQTT_CLEAN_START_FIRST_ONLY if clean else False
        self._mqttv5_first_connect = clean
        self._clean_session = clean  # paho private

    def again_here(self) -> None:
        """The next connection attempt goes to this node again: a close of
        our own (not a lost node) must not move the client along the cluster."""
        self._same_again = True

    def _speak_311(self) -> None:
        self._protocol = paho.MQTTv311  # paho private
        self._clean_session = not self.persistent  # paho private; (3.1.1 has no expiry: a persistent session stays)
        self._connect_properties = None  # paho private; (MQTT 5 only: session expiry)

    # -- connecting off the owner's thread (salvo.net.link) ------------------------------
    #
    # paho's reconnect() is a blocking socket connect (and TLS or websocket
    # handshake) amid work on paho's state. An owner that must never block
    # (an event loop) splits it: begin_attempt() and connect_on() on its own
    # thread, open_socket() (the blocking part alone) on another.

    def begin_attempt(self) -> None:
        """On the owner's thread: pick this attempt's node (the next one of a
        cluster after the first attempt), for :meth:`open_socket`."""
        self._why, self._refused = "", False
        self._next_endpoint()

    def open_socket(self) -> Any:
        """On any thread: the blocking part of paho's reconnect() alone, a
        socket to :meth:`begin_attempt`'s node (TCP, then TLS or websocket
        handshake, each within ``connect_timeout``), or OSError. It only
        reads settings nobody changes during an attempt (node, TLS context,
        timeout, proxy) and touches no session or queue."""
        return paho.Client._create_socket(self)  # noqa: SLF001 (paho private, the blocking half of reconnect(); guarded)

    def connect_on(self, sock: Any) -> MQTTErrorCode:
        """On the owner's thread: the rest of paho's reconnect() with
        :meth:`open_socket`'s socket: paho's state reset for a new
        connection, its socket callbacks, CONNECT queued. The socket is
        paho's from here on (closed here when paho fails before taking it)."""
        self._handed = sock
        try:
            return self.reconnect()
        finally:
            if self._handed is not None:  # reconnect() failed before taking it
                self._handed = None
                with contextlib.suppress(OSError):
                    sock.close()

    def _create_socket(self) -> Any:
        # reconnect() calls this: connect_on's socket, when there is one
        sock, self._handed = self._handed, None
        return sock if sock is not None else super()._create_socket()

    def _pick_endpoint(self, _client: paho.Client, _userdata: Any) -> None:
        # Called by reconnect() itself, in state "connecting": paho's host
        # and port setters refuse then, so the fields are set directly.
        if self._protocol == paho.MQTTv5 and self.endpoints in _REFUSED_MQTT5:  # paho private
            self._speak_311()  # another client of this process learned it
        if self._handed is None:  # (connect_on: begin_attempt picked the node)
            self._next_endpoint()
        self._quiet_disconnect = False  # (a socket closed without its callback)

    def _next_endpoint(self) -> None:
        if self._tried and not self._same_again and len(self.endpoints) > 1:
            self._node = (self._node + 1) % len(self.endpoints)
            endpoint = self.endpoints[self._node]
            self._host, self._port = endpoint  # paho private
        self._tried, self._same_again = True, False


def read_qos(client: Client) -> int:
    """The QoS a reader (a team, a spectator, a watcher: not the referee)
    subscribes with: 1, or 0 on a broker that refused MQTT 5. NATS (which
    does) makes each QoS 1 subscription a JetStream consumer placed on some
    node of the cluster; when that node dies, a client still connected to
    another node gets nothing more on it until it subscribes again. At QoS 0
    the subscription lives on the client's own node. A reader catches up from
    the retained state whenever it (re)subscribes, so QoS 0 loses it nothing
    that a lost connection would not lose anyway."""
    return 1 if client.mqtt5 else 0


def new_client(
    broker: Broker,
    client_id: str = "",
    *,
    manual_ack: bool = False,
    will: tuple[str, str] | None = None,
    persistent: bool = False,
    connect_timeout: float = 5.0,
) -> Client:
    """A :class:`Client` with credentials, TLS and a retained last will
    (topic, payload) set up; not yet connected. ``persistent`` keeps the
    session on a 3.1.1 broker (MQTT 5: see :func:`connect_async`)."""
    client = Client(broker, client_id, manual_ack=manual_ack, persistent=persistent)
    if broker.transport == "websockets":
        client.ws_set_options(path=broker.path)
    if broker.tls:
        client.tls_set_context(ssl.create_default_context(cafile=broker.ca_file))
    if broker.username is not None:
        client.username_pw_set(broker.username, broker.password)
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True)
    client.reconnect_delay_set(min_delay=1, max_delay=30)
    client.connect_timeout = connect_timeout
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


#: CONNACK reason codes that retrying will not mend: bad credentials, not authorised.
_REFUSED: Final = (0x86, 0x87, 0x8C)


@contextlib.contextmanager
def one_shot(broker: Broker, what: str, timeout: float) -> Iterator[tuple[Client, float]]:
    """A short connection with a random client id and no will, connected:
    (the client, the monotonic deadline left for the work). TimeoutError when
    the broker cannot be reached within ``timeout``; PermissionError when it
    refuses the credentials."""
    deadline = time.monotonic() + timeout
    connected, answered = threading.Event(), threading.Event()
    refused: list[str] = []
    client = new_client(broker, f"salvo-{what}-{os.urandom(6).hex()}")

    def on_connect(_c: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            if rc.value in _REFUSED:  # retrying will not help
                refused.append(str(rc))
                answered.set()
            return
        connected.set()
        answered.set()

    client.on_connect = on_connect
    connect_async(client, broker)
    client.loop_start()
    try:
        if not answered.wait(timeout):
            raise TimeoutError(f"the broker at {broker.url} cannot be reached")
        if refused:
            raise PermissionError(f"broker {broker.url} refused the connection: {refused[0]}")
        yield client, deadline
    finally:
        client.disconnect()
        client.loop_stop()


def read_retained(broker: Broker, filters: list[str], marker_topic: str, *, timeout: float = 30.0) -> dict[str, bytes]:
    """What the broker holds retained under ``filters``, topic -> payload
    (empty ones left out). A marker published on ``marker_topic`` (which the
    login may write and read) comes back after every retained message of
    the subscription. TimeoutError, PermissionError: see :func:`one_shot`."""
    marker, found, done = os.urandom(8).hex().encode(), {}, threading.Event()

    def on_message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        if msg.topic == marker_topic:
            if bytes(msg.payload) == marker:
                done.set()
        elif msg.retain and msg.payload:
            found[msg.topic] = bytes(msg.payload)

    with one_shot(broker, "read", timeout) as (client, deadline):
        client.on_message = on_message
        client.subscribe([(f, 0) for f in [*filters, marker_topic]])
        client.publish(marker_topic, marker, qos=0)  # after the subscription's retained messages
        if not done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"the broker at {broker.url} did not answer")
    return found


def clear_retained(broker: Broker, topics: list[str], *, timeout: float = 30.0) -> None:
    """An empty retained message on each topic (the broker forgets what it
    held there), each acknowledged. TimeoutError, PermissionError: see
    :func:`one_shot`."""
    with one_shot(broker, "clear", timeout) as (client, deadline):
        for info in [client.publish(topic, b"", qos=1, retain=True) for topic in topics]:
            info.wait_for_publish(max(0.0, deadline - time.monotonic()))
            if not info.is_published():
                raise TimeoutError(f"the broker at {broker.url} did not acknowledge clearing {len(topics)} topics")
