"""``salvo spectate``: serve the live spectator page.

The page (``salvo/data/spectate.html``) is static: it connects straight from
the browser to the broker's websockets listener, read-only (anonymous, and
the ACL lets anonymous clients read only the public topics). This server only
hands out the page, with the broker's websocket address written into it.
"""

from __future__ import annotations

import html
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files

log = logging.getLogger("salvo.spectate")

PLACEHOLDER = "__SALVO_BROKER__"


def page(broker_ws: str | None) -> bytes:
    """The page, pointed at ``broker_ws`` (None: the page's own host, port 9001)."""
    text = (files("salvo") / "data" / "spectate.html").read_text(encoding="utf-8")
    if broker_ws:
        text = text.replace(PLACEHOLDER, html.escape(broker_ws, quote=True))
    return text.encode()


class SpectatorServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], broker_ws: str | None) -> None:
        self.body = page(broker_ws)
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = "localhost" if host in ("0.0.0.0", "::", "") else host
        return f"http://{shown!s}:{port}/"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (tests and embedding)."""
        t = threading.Thread(target=self.serve_forever, name="spectate-http", daemon=True)
        t.start()
        return t


class _Handler(BaseHTTPRequestHandler):
    server: SpectatorServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/", "/index.html"):
            self.send_error(HTTPStatus.NOT_FOUND, "only / is served here")
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)
