"""The console served on the director's web server (uvicorn in a daemon
thread, over TLS when given a certificate and its key), with the projector
and the replays beside it when given a :class:`~salvo.web.spectate.Projector`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from salvo.organiser.console.app import create_app, stop_streams
from salvo.organiser.console.auth import ConsoleError, check_password
from salvo.organiser.tournament.controls import Controls
from salvo.web.spectate import Projector
from salvo.web.webserver import WebServer

#: where the projector page is on the console's server (its "/" is the console)
PROJECTOR_PATH = "/projector"


class Console(WebServer):
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
        projector: Projector | None = None,
        health: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        check_password(password)
        self.projector = projector
        extra = projector.routes(page_at=(PROJECTOR_PATH,)) if projector else []
        app = create_app(controls, password, secure=certfile is not None, routes=extra, health=health)

        def on_close() -> None:
            stop_streams(app)
            if projector is not None:
                projector.stop()

        super().__init__(
            app,
            host,
            port,
            certfile=certfile,
            keyfile=keyfile,
            name="the console",
            error=ConsoleError,
            on_close=on_close,
        )

    @property
    def projector_url(self) -> str | None:
        return f"{self.url.rstrip('/')}{PROJECTOR_PATH}" if self.projector else None

    def start(self) -> Console:
        super().start()
        if self.projector is not None:
            self.projector.start()
        return self

    def __enter__(self) -> Console:
        return self.start()
