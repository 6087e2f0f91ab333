"""The projector and the replays on the web: ``salvo spectate``, and the same
routes on the director's organiser console.

Browsers never speak MQTT. What the broker says is kept by a
:class:`~salvo.web.audience.Hub` (fed by one paho client) and streamed to each
browser as server-sent events on ``GET /events``:

- ``event: status``, data ``{"broker": "up"|"down", "reset": bool, "now": t}``.
  With ``reset`` true the browser forgets everything: the whole state follows.
  It opens every stream (then this game's history and the retained snapshot
  follow) and is sent to every stream when the broker connection comes back
  (then the broker replays its retained messages). ``reset`` false: the broker
  went away; what the browser shows is stale until the next reset.
- ``message`` events, data ``{"topic", "payload", "retained"}``: the history,
  the snapshot (``retained`` true), then live messages (``retained`` as
  published). The history is every arena's salvos and sinks of the game it is
  playing, in the order heard: only the last salvo is retained, and a page
  opened mid-game would otherwise count the shots and hits of that one alone.
- ``event: clock``, data ``{"now": t}``, when nothing else was sent for a
  while. ``now`` is this server's clock (Unix seconds): the page counts
  deadlines (``/game/deadline`` says when, not how long) down on it, not on
  the projector machine's clock, which may be minutes off.

The projector page is ``/`` (``/projector`` on the console, whose ``/`` is
the organiser's page), with its static files, and ``/replay``, the replay
viewer. Game records (``/game/record``, retained at game over and cleared at
reset) are also kept by game id after their arena moved on, so that a replay
link stays good all evening:

- ``GET /record?arena=<prefix>``: the arena's current record (``-`` or empty
  for the unprefixed arena);
- ``GET /record?game=<id>``: a record seen tonight, by its game id;
- ``GET /record``: the record this server was started with (``salvo replay``);
- ``GET /records``: the games whose records are kept, newest first (id,
  players, winner, termination, arena, when): the replay viewer's list of
  the night.

Every route here is public and read-only; its pages allow scripts from this
server only (Content-Security-Policy), so text a team chose can never run as
script beside the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from importlib.resources import files

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from salvo.net.loop import Loop
from salvo.net.mqtt import Broker
from salvo.web.audience import MAX_CLIENTS, Feed, Hub, read_records, record_game, subscriptions
from salvo.web.webserver import WebServer, loopback

__all__ = ["Hub", "Projector", "SpectatorServer", "read_records", "record_game", "subscriptions"]

HEARTBEAT_S = 15.0  # an idle stream gets the clock this often (proxies close silent streams)
LOOPBACK_RESERVE = 16  # of the hub's streams, kept for this laptop's own screens
MAX_STREAMS = MAX_CLIENTS - LOOPBACK_RESERVE  # open event streams from the venue, all addresses together
MAX_PER_ADDRESS = 16  # one laptop on the venue network cannot shut the projector out (loopback may)
CHUNK = 64 * 1024  # the start of a stream is written this much at a time
PAGE = ("spectate.html", "text/html; charset=utf-8")
FILES = {  # path -> (file under salvo/web/data, content type)
    "/replay": ("replay.html", "text/html; charset=utf-8"),
    "/spectate.css": ("spectate.css", "text/css; charset=utf-8"),
    "/spectate.js": ("spectate.js", "text/javascript; charset=utf-8"),
    "/board.js": ("board.js", "text/javascript; charset=utf-8"),
    "/replay.js": ("replay.js", "text/javascript; charset=utf-8"),
}
# The pages set a CSS variable inline (style attributes); scripts only from here.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def page(name: str = "spectate.html") -> bytes:
    return (files("salvo.web") / "data" / name).read_bytes()


def _chunks(events: list[bytes]) -> Iterator[bytes]:
    """``events`` joined into pieces of about CHUNK bytes."""
    batch: list[bytes] = []
    size = 0
    for event in events:
        batch.append(event)
        size += len(event)
        if size >= CHUNK:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


class Projector:
    """The projector's routes over a hub, and the feed filling it from
    ``broker`` (None: whatever is fed into :attr:`hub` by hand, as in
    ``salvo replay`` and tests). ``records``: records to serve without a
    broker; ``GET /record`` answers the last of them. ``history``: the
    games' salvos and sinks so far, which the broker does not retain (the
    director's, from its referee's journal; see :meth:`Hub.seed`). ``loop``:
    the feed's client runs on it (the director's referee loop), not on a
    thread of paho's."""

    def __init__(
        self,
        broker: Broker | None,
        hub: Hub | None = None,
        records: Sequence[bytes] = (),
        history: Callable[[], Iterable[tuple[str, str]]] | None = None,
        *,
        loop: Loop | None = None,
    ) -> None:
        self.hub = hub or Hub()
        self.own_record = records[-1] if records else None
        for record in records:
            self.hub.keep_record(record)
        self.feed = Feed(self.hub, broker, history, loop=loop) if broker else None
        self.heartbeat_s = HEARTBEAT_S
        self.max_streams = MAX_STREAMS
        self.streams: Counter[str] = Counter()  # open streams per address (touched on the event loop only)
        self.files = {path: (page(name), kind) for path, (name, kind) in FILES.items()}

    def routes(self, page_at: Sequence[str] = ("/", "/index.html", "/projector")) -> list[BaseRoute]:
        """Its routes, with the projector page on ``page_at``."""
        projector = page(PAGE[0])

        async def show_page(request: Request) -> Response:
            return Response(projector, 200, HEADERS, PAGE[1])

        async def static(request: Request) -> Response:
            body, kind = self.files[request.url.path]
            return Response(body, 200, HEADERS, kind)

        return [
            *(Route(path, show_page, methods=["GET"]) for path in page_at),
            *(Route(path, static, methods=["GET"]) for path in self.files),
            Route("/record", self._record, methods=["GET"]),
            Route("/records", self._games, methods=["GET"]),
            Route("/events", self._events, methods=["GET"]),
        ]

    def start(self) -> None:
        if self.feed:
            self.feed.start()

    def stop(self) -> None:
        """End every stream, then stop the broker client (streams first:
        the web server stops once they have ended, whatever the broker does)."""
        self.hub.close()
        if self.feed:
            self.feed.stop()

    async def _record(self, request: Request) -> Response:
        query = request.query_params
        if "game" in query:
            body = self.hub.record(game=query["game"])
        elif "arena" in query:
            body = self.hub.record(arena=query["arena"].strip("-/"))
        else:
            body = self.own_record
        if body is None:
            return PlainTextResponse("no such record (yet)", 404, HEADERS)
        return Response(body, 200, HEADERS, "application/json")

    async def _games(self, request: Request) -> Response:
        return JSONResponse(self.hub.games(), 200, HEADERS)

    def _refuse(self, address: str) -> str | None:
        """Why a stream from ``address`` may not open now, if it may not.
        This laptop's own screens always get one: the caps are the venue's."""
        if loopback(address):
            return None
        if sum(n for a, n in self.streams.items() if not loopback(a)) >= self.max_streams:
            return "too many spectators"
        if self.streams[address] >= MAX_PER_ADDRESS:
            return f"at most {MAX_PER_ADDRESS} streams from one address"
        return None

    async def _events(self, request: Request) -> Response:
        headers = {**HEADERS, "X-Accel-Buffering": "no"}  # nginx: do not hold events back
        if request.method == "HEAD":  # no body is ever sent: a stream would never end, nor be cut
            return Response(b"", 200, headers, "text/event-stream; charset=utf-8")
        address = request.client.host if request.client else "?"
        refused = self._refuse(address)
        if refused:
            return PlainTextResponse(refused, 503, {**HEADERS, "Retry-After": "10"})
        return StreamingResponse(self._stream(address), 200, headers, "text/event-stream; charset=utf-8")

    async def _stream(self, address: str) -> AsyncIterator[bytes]:
        """Counted for as long as the connection lasts (a dropped browser
        stuck in a write still holds one), from where nothing awaits between
        the check and the count: simultaneous requests all pass the
        handler's check."""
        refused = self._refuse(address)
        if refused:
            yield b"retry: 10000\n\n"  # the EventSource comes back later
            return
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:  # from the MQTT thread
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(ready.set)

        attached = self.hub.attach(wake)
        if attached is None:
            yield b"retry: 10000\n\n"
            return
        client, start = attached
        self.streams[address] += 1
        try:
            yield b"retry: 2000\n\n"
            for chunk in _chunks(start):  # a snapshot of megabytes is not one buffer per browser
                yield chunk
            del start
            while not client.closed.is_set():
                ready.clear()
                try:
                    event = client.queue.get_nowait()
                except queue.Empty:  # wait for the next wake-up (cleared first: none is lost)
                    try:
                        await asyncio.wait_for(ready.wait(), self.heartbeat_s)
                    except TimeoutError:
                        yield self.hub.tick()  # also how a vanished browser is noticed
                    continue
                if event is None:
                    break
                yield event
        finally:
            self.streams[address] -= 1
            if not self.streams[address]:
                del self.streams[address]
            self.hub.detach(client)


class SpectatorServer:
    """``salvo spectate`` and ``salvo replay``: the projector's routes on a
    web server of their own (plain HTTP). The port is taken at once."""

    def __init__(
        self, address: tuple[str, int], broker: Broker | None, hub: Hub | None = None, records: Sequence[bytes] = ()
    ) -> None:
        self.projector = Projector(broker, hub, records)
        app = Starlette(routes=self.projector.routes())
        self.web = WebServer(app, *address, name="the spectator server", on_close=self.projector.stop)
        self.web.listen()

    @property
    def hub(self) -> Hub:
        return self.projector.hub

    @property
    def feed(self) -> Feed | None:
        return self.projector.feed

    @property
    def url(self) -> str:
        return self.web.url

    @property
    def port(self) -> int:
        return self.web.port

    def start(self) -> SpectatorServer:
        """Serve in a daemon thread (returns once it answers), reading the broker."""
        self.web.start()
        self.projector.start()
        return self

    def close(self) -> None:
        """Stop the broker client, end every stream, stop serving."""
        self.web.close()
