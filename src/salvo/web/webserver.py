"""A Starlette application served by uvicorn in a daemon thread with its own
event loop, over TLS when given a certificate and its key. The certificate
and key files are watched: re-issued (``salvo tls``), they are served to the
next connections without a restart.

One web server per process: the projector, the replays and (on the
director) the organiser console are routes of the same application.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h11
import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol

from salvo.failures import Failure
from salvo.web import weblog

log = logging.getLogger("salvo.web")

START_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 3.0
# A connection whose sent data goes unacknowledged this long is cut by the
# kernel (TCP_USER_TIMEOUT, inherited by accepted sockets): uvicorn never
# times out a write, and a browser that stops reading would otherwise hold
# its stream, its buffers and a file descriptor for good.
UNACKED_LIMIT_MS = 30_000
# A peer that vanished without a word (its network gone) is found by TCP
# keep-alive probes: idle this long, then probes this often, this many.
KEEPALIVE = (30, 10, 3)
# uvicorn times out neither a request head nor a request body: a request
# must come whole (head and body) within this long of its first byte (of
# the connection, for the first request), or the connection is closed. A
# connection that sends nothing, half a head, or a body that never comes
# would otherwise hold its descriptor, a handler and a slot for good.
REQUEST_S = 10.0
# One address may hold this many connections at once (this laptop's own
# browsers excepted), so that idle connections cannot use up the process's
# descriptors and lock the organiser out of the console.
PER_ADDRESS = 64
MAX_CONNECTIONS = 2000  # in all; then uvicorn answers 503 (a backstop)
# Of those, this many are this laptop's own (loopback): the venue's
# connections stop short of them, closed at once, so that whatever the
# venue holds, the organiser's browser, the projector screen beside it and
# a healthcheck still get in.
LOOPBACK_SLOTS = 64
OPEN_FILES = 8192  # the soft descriptor limit is raised to this (or the hard limit)
# How often a TLS server looks at its certificate and key files (a stat each).
CERT_CHECK_S = 2.0
# h11's states of the other side while its request is still coming in.
_READING = (h11.IDLE, h11.SEND_BODY)


def loopback(address: str) -> bool:
    """Is ``address`` this machine's own (its browsers are trusted with more)?"""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class Slots:
    """The connections one server holds, per address and the venue's in all
    (touched on the server's event loop only)."""

    def __init__(self) -> None:
        self.per_address: Counter[str] = Counter()
        self.venue = 0  # held from addresses that are not loopback
        self.refused = 0  # venue connections closed at once, past a limit
        self.timed_out = 0  # connections closed because a request did not come whole in time

    def admit(self, address: str, venue: bool) -> bool:
        """Take a slot for a connection from ``address``, if it may have one."""
        if venue:
            if self.per_address[address] >= PER_ADDRESS or self.venue >= MAX_CONNECTIONS - LOOPBACK_SLOTS:
                self.refused += 1
                return False
            self.venue += 1
        self.per_address[address] += 1
        return True

    def release(self, address: str, venue: bool) -> None:
        self.per_address[address] -= 1
        if self.per_address[address] <= 0:
            del self.per_address[address]
        if venue:
            self.venue -= 1


class _Accepted(socket.socket):
    """An accepted connection's socket: its slot is given back when it is closed."""

    release: Callable[[], None] | None = None

    def close(self) -> None:
        release, self.release = self.release, None
        if release is not None:
            release()
        super().close()


class _Listener(socket.socket):
    """The listening socket. A connection takes its slot when it is accepted,
    before a TLS handshake or a byte of a request (over TLS, uvicorn's
    protocol hears of a connection only once its handshake is done, and
    asyncio gives a handshake 60 s), and holds it until its socket is
    closed; one that may not have one is closed at once and never reaches
    uvicorn. Only the server's event loop accepts."""

    slots: Slots

    def accept(self) -> tuple[socket.socket, Any]:
        while True:  # no connection (left) waiting: BlockingIOError, as the event loop expects
            fd, addr = self._accept()  # type: ignore[attr-defined]
            conn = _Accepted(self.family, self.type, self.proto, fileno=fd)
            address = str(addr[0]) if isinstance(addr, tuple) else "?"
            venue = not loopback(address)
            if self.slots.admit(address, venue):
                conn.release = functools.partial(self.slots.release, address, venue)
                return conn, addr
            conn.close()


def _guarded(slots: Slots) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with the request's time limit, counted in ``slots``."""

    class Guarded(H11Protocol):
        _read_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._read_timer = self.loop.call_later(REQUEST_S, self._too_slow)

        def data_received(self, data: bytes) -> None:
            if self._read_timer is None:  # the first bytes of the next request
                self._read_timer = self.loop.call_later(REQUEST_S, self._too_slow)
            super().data_received(data)
            if self.conn.their_state not in _READING:  # all there (or over): it has its answer's time
                self._read_timer.cancel()
                self._read_timer = None

        def _too_slow(self) -> None:
            self._read_timer = None
            if self.conn.their_state in _READING and not self.transport.is_closing():
                slots.timed_out += 1
                self.transport.close()  # a handler waiting for the body is told the client is gone

        def connection_lost(self, exc: Exception | None) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            super().connection_lost(exc)

    return Guarded


def _raise_open_files() -> None:
    try:
        import resource
    except ImportError:  # not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= OPEN_FILES:
        return
    new = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    with contextlib.suppress(ValueError, OSError):  # else the limit stays; the per-address limits still hold
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def _live_ssl_context(config: uvicorn.Config) -> ssl.SSLContext | None:
    """The SSLContext every TLS handshake of the server uses.

    UVICORN INTERNALS, the only place salvo reaches into them for TLS:
    ``Config.load()`` builds the context from ``ssl_certfile``/``ssl_keyfile``
    into ``Config.ssl``, which ``Server.serve`` hands to the event loop's
    ``create_server``; that attribute is not documented API. Loading a new
    chain into this very object is what makes new handshakes use it."""
    context = getattr(config, "ssl", None)
    return context if isinstance(context, ssl.SSLContext) else None


class CertificateWatch:
    """The certificate and key files behind a live SSLContext: when either
    file changes (inode, size or modification time: ``salvo tls`` replaces
    them atomically, the key first), the pair is tried in a context of its
    own and, only if it loads (a certificate and its own key), loaded into
    the live one, so the next handshakes use it. Connections already open
    keep theirs. A pair that does not load yet (the key replaced, the
    certificate not yet) leaves the old one served and is tried again at
    the next change."""

    def __init__(self, context: ssl.SSLContext, certfile: Path, keyfile: Path, name: str) -> None:
        self.context, self.certfile, self.keyfile, self.name = context, certfile, keyfile, name
        self.seen = self._stat()
        self.loaded = 0  # reloads so far

    def _stat(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in map(os.stat, (self.certfile, self.keyfile)))
        except OSError:  # one of them replaced this very moment, or gone: look again later
            return None

    def check(self) -> bool:
        """Load the files into the live context if they changed and make a
        pair; True when they were."""
        now = self._stat()
        if now is None or now == self.seen:
            return False
        self.seen = now
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as exc:
            log.warning(
                "%s: the new certificate and key do not load yet (%s); still serving the old ones", self.name, exc
            )
            return False
        try:
            self.context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as exc:  # replaced again between the two loads: the next look tries again
            self.seen = None
            log.warning("%s: the certificate changed while it was loaded (%s); trying again", self.name, exc)
            return False
        self.loaded += 1
        log.info("%s: serving the new certificate %s to new connections", self.name, self.certfile)
        return True


class ServeError(Failure):
    """The web server cannot start as asked (a busy port, a bad certificate)."""


class WebServer:
    """``start()`` serves ``app``; ``url`` is where; ``close()`` stops within
    about a second, after ``on_close`` (which ends the open event streams:
    uvicorn waits for them otherwise). ``name`` says whose server it is in
    errors; ``error`` is the exception they are raised as."""

    def __init__(
        self,
        app: Starlette,
        host: str,
        port: int,
        *,
        certfile: str | Path | None = None,
        keyfile: str | Path | None = None,
        name: str = "the web server",
        error: type[ServeError] = ServeError,
        on_close: Callable[[], None] = lambda: None,
    ) -> None:
        self.name, self.error, self.on_close = name, error, on_close
        if (certfile is None) != (keyfile is None):
            raise error(f"{name}'s TLS needs both a certificate and its key")
        self.app, self.host, self.tls = app, host, certfile is not None
        self.slots = Slots()
        self.config = uvicorn.Config(
            app,
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
            lifespan="off",
            log_config=None,  # the CLI sets up logging
            access_log=False,
            timeout_graceful_shutdown=1,
            http=_guarded(self.slots),
            limit_concurrency=MAX_CONNECTIONS,
        )
        try:
            self.config.load()  # a bad certificate or key fails here, not in the thread
        except (OSError, ssl.SSLError) as exc:
            raise error(f"{name}'s certificate or key cannot be used: {exc}") from exc
        self.server = uvicorn.Server(self.config)
        context = _live_ssl_context(self.config)
        self.certificates = (
            CertificateWatch(context, Path(certfile), Path(keyfile), name)
            if context is not None and certfile is not None and keyfile is not None
            else None
        )
        self.cert_check_s = CERT_CHECK_S
        self._port = port
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen for port 0, once started)."""
        return self._port

    @property
    def url(self) -> str:
        shown = "localhost" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"{'https' if self.tls else 'http'}://{shown}:{self.port}/"

    def listen(self) -> None:
        """Take the port now (a busy one fails here); :meth:`start` serves on it."""
        if self._sock is not None:
            return
        try:
            family = socket.getaddrinfo(self.host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            made = socket.create_server((self.host, self._port), family=family, backlog=128)
            listener = _Listener(made.family, made.type, made.proto, fileno=made.detach())
            listener.slots = self.slots
            self._sock = listener
            if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, UNACKED_LIMIT_MS)
            if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; inherited by accepted sockets like the above
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for option, value in zip(("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT"), KEEPALIVE, strict=True):
                    self._sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        except OSError as exc:
            raise self.error(f"{self.name} cannot listen on {self.host}:{self._port}: {exc.strerror or exc}") from exc
        self._port = int(self._sock.getsockname()[1])

    def start(self) -> WebServer:
        """Listen, serve in a thread; returns once it answers."""
        _raise_open_files()
        weblog.install()  # before the first request: per-request lines are budgeted
        self.listen()
        self._thread = threading.Thread(target=self._run, name="salvo-web", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise self.error(f"{self.name} did not start: {self._failed or 'timed out'}")
            time.sleep(0.01)
        return self

    def _run(self) -> None:
        assert self._sock is not None
        try:
            asyncio.run(self._serve(self._sock))
        except BaseException as exc:  # SystemExit from uvicorn included: the caller is told
            self._failed = exc

    async def _serve(self, sock: socket.socket) -> None:
        watch = asyncio.create_task(self._watch_certificates()) if self.certificates else None
        summing = asyncio.create_task(self._sum_up_logs())
        try:
            await self.server.serve(sockets=[sock])
        finally:
            summing.cancel()
            if watch is not None:
                watch.cancel()

    async def _sum_up_logs(self) -> None:
        """A flood's held-back lines are summed up when its window ends,
        not only at the next line."""
        while True:
            await asyncio.sleep(weblog.ROLL_CHECK_S)
            weblog.BUDGET.roll()

    async def _watch_certificates(self) -> None:
        """On the server's own loop, between handshakes (a context is not
        changed under a handshake in another thread)."""
        assert self.certificates is not None
        while True:
            await asyncio.sleep(self.cert_check_s)
            try:
                self.certificates.check()
            except Exception:  # the old certificate is still served; never the end of the server
                log.exception("%s: looking at the certificate files failed", self.name)

    def close(self) -> None:
        self.on_close()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()
