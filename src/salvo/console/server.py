"""The console served by uvicorn in a daemon thread with its own event
loop, over TLS when given a certificate and its key."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from pathlib import Path

import uvicorn

from salvo.console.app import create_app, stop_streams
from salvo.console.auth import ConsoleError, check_password
from salvo.tournament.controls import Controls

START_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 3.0


def _listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise ConsoleError(f"the console cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


class Console:
    """``start()`` serves; ``url`` is where; ``close()`` stops within about
    a second (open event streams end first)."""

    def __init__(
        self,
        controls: Controls,
        host: str,
        port: int,
        password: str,
        certfile: str | Path | None = None,
        keyfile: str | Path | None = None,
    ) -> None:
        check_password(password)
        if (certfile is None) != (keyfile is None):
            raise ConsoleError("the console's TLS needs both a certificate and its key")
        self.host, self.tls = host, certfile is not None
        self.app = create_app(controls, password, secure=self.tls)
        self.config = uvicorn.Config(
            self.app,
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
            lifespan="off",
            log_config=None,  # the CLI sets up logging
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        try:
            self.config.load()  # a bad certificate or key fails here, not in the thread
        except (OSError, ssl.SSLError) as exc:
            raise ConsoleError(f"the console's certificate or key cannot be used: {exc}") from exc
        self.server = uvicorn.Server(self.config)
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

    def start(self) -> Console:
        """Listen, serve in a thread; returns once it answers."""
        self._sock = _listen(self.host, self._port)
        self._port = int(self._sock.getsockname()[1])
        self._thread = threading.Thread(target=self._run, name="salvo-console", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise ConsoleError(f"the console did not start: {self._failed or 'timed out'}")
            time.sleep(0.01)
        return self

    def _run(self) -> None:
        assert self._sock is not None
        try:
            asyncio.run(self.server.serve(sockets=[self._sock]))
        except BaseException as exc:  # SystemExit from uvicorn included: the caller is told
            self._failed = exc

    def close(self) -> None:
        stop_streams(self.app)
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> Console:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()
