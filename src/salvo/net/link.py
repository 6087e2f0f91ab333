"""One paho connection on a :class:`~salvo.net.loop.Loop`, with no paho thread.

paho's socket callbacks tell the loop what to watch, as aiomqtt does:
``on_socket_open`` registers the socket for reading, ``on_socket_close``
removes it, ``on_socket_register_write``/``on_socket_unregister_write`` say
when paho has bytes it could not write yet. The loop then calls
``loop_read``/``loop_write``, and ``loop_misc`` (keep-alive) on a timer.
A link also (re)connects with jittered, capped back-off.

Each attempt after the first goes to the next node of a cluster
(:class:`salvo.net.mqtt.Client`). Connecting never blocks the loop: one
loop serves every arena of a process, and a node that drops packets would
hold all of them up to ``connect_timeout`` (CONNECT_TIMEOUT_S) per attempt.
An attempt is split in three (``Client.begin_attempt``, ``open_socket``,
``connect_on``): the loop picks the node; a thread of the attempt's own
makes the socket (TCP connect, TLS or websocket handshake: the blocking
part of paho's ``reconnect()``, which reads only the client's settings);
the loop gets it back through ``Loop.call_soon_threadsafe`` and hands it to
paho, which resets its state, calls the socket callbacks and queues CONNECT
as its own ``reconnect()`` does. So paho runs only on the loop's thread, all
but that socket connect: what is published meanwhile waits in paho's queue,
as between attempts, and goes out after CONNACK. A link closed or aborted
while its attempt is under way closes the socket the attempt yields and
does not reconnect; a failed attempt (refused, unreachable, timed out, a
TLS error) takes the usual back-off.
"""

from __future__ import annotations

import contextlib
import logging
import random
import select
import socket
import threading
from collections.abc import Callable
from typing import Any, Final

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from salvo.net import pahofast
from salvo.net.loop import Handle, Loop, Timer
from salvo.net.mqtt import Broker, Client

log = logging.getLogger("salvo.referee")

# paho's Properties with their constant tables made once: ~9 us less to read
# a fire on MQTT 5, on its way to its hit (the reason: salvo.net.pahofast).
pahofast.install()

#: Reconnect back-off: first retry after this, doubling up to RETRY_MAX_S,
#: each wait jittered down to half (many connections do not retry in step).
#: Capped at a second: a broker back from a restart without persistence has
#: no session for the referee, and shots sent before it resubscribes are lost.
RETRY_MIN_S: Final = 0.1
RETRY_MAX_S: Final = 1.0
#: paho's keep-alive and timeout bookkeeping (loop_misc) runs this often.
MISC_EVERY_S: Final = 1.0
#: An attempt's TCP (and TLS) connect gives up after this long (paho's default
#: is 5 s) on a node that drops packets (off the loop: the other arenas go
#: on meanwhile); a node that is down refuses at once. (Set by whoever makes
#: the client: paho refuses it once connect_async ran.)
CONNECT_TIMEOUT_S: Final = 2.0
#: A readable socket is read for at most this many packets at a time (the
#: other arenas wait meanwhile): enough for a salvo to become one batch.
READ_MAX: Final = 64


def _reason(packet_type: int, name: str) -> ReasonCode:
    return ReasonCode(packet_type, name)


#: CONNACK reason codes that retrying will not change.
REFUSED: Final = frozenset(
    _reason(PacketTypes.CONNACK, name).value
    for name in ("Bad user name or password", "Not authorized", "Bad authentication method")
)
#: A drop that looks like a take-over is judged this long after the reconnect.
TAKEOVER_JUDGED_AFTER_S: Final = 2.0
#: DISCONNECT from the broker: another client connected with this client id.
SESSION_TAKEN_OVER: Final = _reason(PacketTypes.DISCONNECT, "Session taken over").value

Guard = Callable[[Callable[[], None]], Callable[[], None]]
#: Runs an attempt's blocking part (the callable) away from the loop's thread.
Connector = Callable[[Callable[[], None]], None]


def _unguarded(callback: Callable[[], None]) -> Callable[[], None]:
    return callback


def logged(name: str) -> Guard:
    """The guard of a client that is not an arena (a watcher, the projector's
    feed) sharing the referee's loop: a bug of its callbacks is logged and
    that callback dropped; left to the loop's owner, it would stop every arena."""

    def guard(callback: Callable[[], None]) -> Callable[[], None]:
        def guarded() -> None:
            try:
                callback()
            except Exception:
                log.exception("[%s] a callback failed: dropped", name)

        return guarded

    return guard


def _in_a_thread(job: Callable[[], None]) -> None:
    """Each attempt on a thread of its own, which lives at most connect_timeout
    (a link has at most one attempt under way): a pool would queue the
    attempts to a healthy node behind those to a node that drops packets."""
    threading.Thread(target=job, name="salvo-connect", daemon=True).start()


class _Attempt:
    """One connection attempt under way away from the loop's thread."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        #: the link no longer wants its socket (closed, aborted)
        self.cancelled = False


class Link:
    """A paho client whose socket the loop drives. ``on_read`` runs after
    each read (the owner applies what the callbacks handed over);
    ``on_closed`` after the socket closed. ``guard`` wraps every callback
    the link gives the loop (its owner's error isolation). ``connector``
    runs the blocking part of each attempt (a thread of its own by default;
    a test may run it at once)."""

    def __init__(
        self,
        loop: Loop,
        client: Client,
        role: str,
        *,
        name: str,
        broker: Broker,
        on_message: Callable[[paho.Client, Any, paho.MQTTMessage], None] | None = None,
        on_read: Callable[[], None] | None = None,
        on_closed: Callable[[], None] | None = None,
        guard: Guard = _unguarded,
        connector: Connector = _in_a_thread,
    ) -> None:
        self.loop = loop
        self.client = client
        self.role = role
        self.name = name
        self._broker = broker
        #: the back-off: current wait, and when the next try may start
        self.delay = 0.0
        self.retry_at = 0.0
        #: no more (re)connecting: the owner is stopping
        self.closing = False
        #: no reconnecting until released (release()): its owner must first
        #: prove on another connection that it may still speak
        self.held = False
        #: messages this connection delivered (to tell a read that found one)
        self.received = 0
        self._on_message = on_message
        self._on_read = on_read or (lambda: None)
        self._on_closed = on_closed or (lambda: None)
        self._sock: Any = None
        self._fd = -1
        # One descriptor's "anything more?" without an exception (a
        # loop_read that finds nothing raises inside paho); poll(), unlike
        # select(), takes any descriptor number.
        self._peek = select.poll()
        self._retry: Handle | None = None
        #: the attempt under way away from the loop's thread
        self._underway: _Attempt | None = None
        self._connector = connector
        self._guard = guard
        self._misc: Timer | None = None
        self._write_due = False
        self._attempt_cb = guard(self._attempt)
        self._read_cb = guard(self._read)
        self._write_cb = guard(self._write)
        self._write_soon_cb = guard(self._write_soon)
        self._misc_cb = guard(self._do_misc)
        client.attempts_by_owner = True  # (paho connects only through _attempt)
        client.whole_packets = True  # (salvo.net.pahofast: this thread alone reads the socket)
        self._chained_open = client.on_socket_open  # (salvo.net.mqtt's TCP_NODELAY)
        client.on_socket_open = self._opened
        client.on_socket_close = self._closed
        client.on_socket_register_write = self._register_write
        client.on_socket_unregister_write = self._unregister_write
        if on_message is not None:
            client.on_message = self._message

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    @property
    def connecting(self) -> bool:
        """An attempt is under way away from the loop's thread (no socket yet)."""
        return self._underway is not None

    def start(self) -> None:
        """Connect now (connect_async has said where), and again whenever the
        connection is lost, after the back-off."""
        self.closing = False
        self._retry = self.loop.call_soon(self._attempt_cb)

    def up(self) -> None:
        """The broker accepted the connection: the next outage starts its
        back-off from the beginning again."""
        self.delay = 0.0

    def release(self) -> None:
        """Reconnect again (now, when lost and held)."""
        if self.held:
            self.held = False
            if not self.closing and self._retry is None and self._idle():
                self._retry = self.loop.call_soon(self._attempt_cb)

    def _idle(self) -> bool:
        """Neither connected nor connecting."""
        return self._underway is None and self.client.socket() is None

    def _attempt(self) -> None:
        self._retry = None
        if self.closing or self.held or not self._idle():
            return
        # Set before trying: a broker that accepts TCP and then refuses the
        # CONNECT closes the socket, and must not be retried in a tight loop.
        self.delay = min(max(RETRY_MIN_S, self.delay * 2), RETRY_MAX_S)
        self.retry_at = self.loop.time() + self.delay * random.uniform(0.5, 1.0)
        self.client.begin_attempt()
        attempt = self._underway = _Attempt()
        try:
            self._connector(lambda: self._open(attempt))
        except RuntimeError as exc:  # no thread to be had (a process or container limit)
            self._underway = None
            self._failed(exc)

    def _open(self, attempt: _Attempt) -> None:
        """Away from the loop's thread: the blocking part, its outcome handed back."""
        sock: Any = None
        error: Exception | None = None
        try:
            sock = self.client.open_socket()
        except Exception as exc:  # (judged on the loop's thread: OSError retries, anything else is a bug)
            error = exc
        if sock is not None and (attempt.cancelled or self.loop.closed):
            _close(sock)  # (if cancelled later, the loop's side closes it)
            return
        self.loop.call_soon_threadsafe(self._guard(lambda: self._landed(attempt, sock, error)))

    def _landed(self, attempt: _Attempt, sock: Any, error: Exception | None) -> None:
        """On the loop's thread: an attempt's socket, or why there is none."""
        if attempt is not self._underway:  # closed or aborted meanwhile
            if sock is not None:
                _close(sock)
            return
        self._underway = None
        if error is not None:
            if not isinstance(error, OSError):
                raise error
            self._failed(error)
            return
        if self.closing or self.held or self.client.socket() is not None:
            _close(sock)  # (held: release() starts the next attempt)
            return
        try:
            self.client.connect_on(sock)
        except OSError as exc:
            if self.client.socket() is not None:  # (paho took the socket, then failed)
                self.client._sock_close()  # noqa: SLF001 (paho private, no public call; guarded: test_brokers)
                self._forget_socket()
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        host, port = self.client.endpoint
        log.warning(
            "[%s] cannot reach broker %s:%d (%s): %s; retrying in %.1f s",
            self.name,
            host,
            port,
            self.role,
            exc,
            self.delay,
        )
        self._retry_later()

    def _retry_later(self) -> None:
        if not self.closing and self._retry is None:
            self._retry = self.loop.call_at(max(self.retry_at, self.loop.time()), self._attempt_cb)

    # -- paho's socket callbacks (on the loop's thread: paho runs only there) ----------

    def _opened(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        if self._chained_open is not None:
            self._chained_open(client, userdata, sock)
        self._sock, self._fd = sock, sock.fileno()
        self.loop.add_reader(self._fd, self._read_cb)
        self._peek.register(self._fd, select.POLLIN)
        self._misc = self.loop.call_later(MISC_EVERY_S, self._misc_cb)

    def _closed(self, _client: paho.Client, _userdata: Any, _sock: Any) -> None:
        self._forget_socket()
        self._retry_later()
        self._on_closed()

    def _forget_socket(self) -> None:
        if self._sock is None:
            return
        self.loop.remove_reader(self._fd)
        self.loop.remove_writer(self._fd)
        self._peek.unregister(self._fd)
        self._sock, self._fd = None, -1
        if self._misc is not None:
            self._misc.cancel()
            self._misc = None

    def _register_write(self, _client: paho.Client, _userdata: Any, _sock: Any) -> None:
        # Written once the current callback is done (a batch's publishes go
        # out together), without asking the selector first: a socket with
        # room in its buffer is the common case. Only a write that could not
        # finish waits for the selector.
        if not self._write_due:
            self._write_due = True
            self.loop.call_soon(self._write_soon_cb)

    def _unregister_write(self, _client: paho.Client, _userdata: Any, _sock: Any) -> None:
        self.loop.remove_writer(self._fd)

    def _message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        self.received += 1
        assert self._on_message is not None
        self._on_message(client, userdata, msg)

    # -- driven by the loop --------------------------------------------------------------

    def _read(self) -> None:
        client = self.client
        sock = client.socket()
        if sock is None:
            return
        # loop_read takes one packet per call (more only while QoS messages
        # are in flight): read on while messages arrive, so a salvo becomes
        # one batch with one journal write.
        plain = type(sock) is socket.socket  # no TLS or websocket buffer in between
        for _ in range(READ_MAX):
            before = self.received
            if client.loop_read() != paho.MQTT_ERR_SUCCESS or client.socket() is not sock:
                break
            if self.received == before or (plain and not self._peek.poll(0)):
                break
        if self._sock is not None and _pending(self._sock):
            # TLS: bytes already decrypted, which the selector cannot see
            self.loop.call_soon(self._read_cb)
        self._on_read()

    def read_now(self) -> None:
        """Read what waits, without waiting for the loop to report it."""
        self._read()

    def has_input(self) -> bool:
        """Bytes wait to be read (the loop has not come to them yet)."""
        return self._sock is not None and (bool(self._peek.poll(0)) or _pending(self._sock))

    def _write_soon(self) -> None:
        self._write_due = False
        self._write()

    def _write(self) -> None:
        client = self.client
        sock = client.socket()
        if sock is None:
            return
        # paho sends each packet with a send() of its own, each carrying a
        # TCP transmit (on loopback, the broker's side of it too): corked, a
        # salvo's hits and turn, or a batch's acks, go out as one segment.
        # Measured (strace -c on the referee, pipelined salvos in 4 arenas,
        # 2026-11-27): ~3 sends a shot either way, their syscall time 14.5
        # -> 8.2 us a shot with the setsockopts. A lone packet (one shot's
        # hit) is not corked: two syscalls for nothing.
        cork = _TCP_CORK is not None and type(sock) is socket.socket and len(client._out_packet) > 1  # noqa: SLF001 (paho private, the queue's length; guarded)
        if cork:
            _set_cork(sock, 1)
        try:
            client.loop_write()  # unregisters the writer itself once all is out
        finally:
            if cork:
                _set_cork(sock, 0)  # pushes what is queued
        if self._sock is not None and client.want_write():
            self.loop.add_writer(self._fd, self._write_cb)

    def write_now(self) -> None:
        """Write what paho holds at once (not after the current callback)."""
        if self._sock is not None and self.client.want_write():
            self._write()

    def _do_misc(self) -> None:
        self._misc = None
        if self.client.socket() is not None:
            self.client.loop_misc()  # may close the socket (keep-alive timeout)
        if self._sock is not None:
            self._misc = self.loop.call_later(MISC_EVERY_S, self._misc_cb)

    # -- ending --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop reconnecting; send DISCONNECT (the broker drops the last will).
        The socket closes once it is written (``on_closed``)."""
        self._stop_trying()
        if self._sock is not None:
            self.client.disconnect()

    def abort(self) -> None:
        """Close the socket without DISCONNECT: the broker publishes the last
        will. Stops reconnecting too."""
        self._stop_trying()
        if self._sock is not None:
            # paho has no public call for this; its own keep-alive timeout
            # closes the socket the same way.
            self.client._sock_close()  # noqa: SLF001 (paho private, no public call; guarded: test_brokers)
            self._forget_socket()

    def _stop_trying(self) -> None:
        """No more attempts; the one under way, if any, closes what it yields."""
        self.closing = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._underway is not None:
            self._underway.cancelled = True
            self._underway = None


class Takeovers:
    """A pair of connections' drops, to tell when one was most likely taken
    over by another client with its client id: the broker closed it while
    the other one stayed up on the same node (the broker itself, or the
    network, would have dropped both). Not on a cluster of brokers: a NATS
    node closes one connection alone while the cluster elects new leaders,
    so there only the broker's own word (DISCONNECT "session taken over")
    counts."""

    def __init__(self, name: str, client_ids: dict[str, str], *, cluster: bool = False) -> None:
        assert len(client_ids) == 2
        self.name = name
        self.client_ids = client_ids
        self._other = dict(zip(client_ids, reversed(client_ids), strict=True))
        self._cluster = cluster
        self._drops = dict.fromkeys(client_ids, 0)
        #: the node each connection is on, while it is up
        self._node: dict[str, tuple[str, int] | None] = dict.fromkeys(client_ids)
        # how often the other connection had dropped when this one did, and
        # whether it was up on the same node then
        self._other_drops_then = dict.fromkeys(client_ids, 0)
        self._other_beside = dict.fromkeys(client_ids, False)

    def dropped(self, role: str, rc: ReasonCode, *, quiet: bool = False) -> None:
        other = self._other[role]
        self._drops[role] += 1
        self._other_drops_then[role] = self._drops[other]
        self._other_beside[role] = self._node[role] is not None and self._node[other] == self._node[role]
        self._node[role] = None
        if quiet:
            return
        if rc.value == SESSION_TAKEN_OVER:  # (mosquitto 2.0.11 just closes the socket)
            self._taken_over(role)
        elif rc.value != 0:
            log.warning("[%s] lost the broker (%s, %s); reconnecting", self.name, role, rc)

    def reconnected(self, role: str, node: tuple[str, int]) -> Callable[[], bool] | None:
        """``role`` is up again. When its drop looks like a take-over, the
        check to run once the other connection had time to report a drop of
        its own (a broker that restarts closes both, but the loop may read
        one close well before the other: 1000 arenas' worth of them)."""
        self._node[role] = node
        other = self._other[role]
        if self._cluster or not (self._drops[role] and self._other_beside[role]):
            return None
        drops_then = self._other_drops_then[role]

        def check() -> bool:
            """True when it was judged a take-over (and logged)."""
            if self._drops[other] == drops_then and self._node[other] is not None:
                self._taken_over(role)
                return True
            return False

        return check

    def _taken_over(self, role: str) -> None:
        log.error(
            "[%s] TAKEN OVER? the broker closed this referee's %s (client id %r) while its other connection stayed"
            " up: another client connected with that id (another referee with the same --client-id, or someone who"
            " knows it). The referee took it back and says 'up' again; see docs/security.md",
            self.name,
            role,
            self.client_ids[role],
        )


def acknowledged(info: paho.MQTTMessageInfo) -> bool:
    """The broker has this message. A QoS 1 message published while the
    connection was down keeps ``rc`` = ``MQTT_ERR_NO_CONN`` for good, and
    ``is_published()`` raises for it, although paho sends it on reconnect and
    marks it published when the PUBACK comes: read that mark itself."""
    if info.rc == paho.MQTT_ERR_NO_CONN:
        return info._published  # noqa: SLF001 (paho private, the only true mark here; guarded: test_brokers)
    try:
        return info.is_published()
    except (RuntimeError, ValueError):  # never queued: it will never be acknowledged
        return False


def _close(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.close()


#: Linux's TCP_CORK (none on macOS or Windows: there the packets go one by one)
_TCP_CORK: Final = getattr(socket, "TCP_CORK", None)


def _set_cork(sock: Any, on: int) -> None:
    assert _TCP_CORK is not None
    with contextlib.suppress(OSError):  # closed meanwhile (a write that failed)
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, on)


def _pending(sock: Any) -> bool:
    """Bytes a TLS socket has already decrypted, which the selector cannot see."""
    pending = getattr(sock, "pending", None)
    return pending is not None and pending() > 0
