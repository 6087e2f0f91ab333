"""The spectator server and page. The server reads the public topics from a
real mosquitto and streams them as server-sent events; the page, in a real
browser (headless Debian Chromium driven by Selenium), must show the right
turn, the salvo, sinks, the defeat, the winner and the tournament standings,
and recover when the broker or the server restarts. Screenshots go to
build/screenshots/."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from salvo.cli import ExitCode, main
from salvo.net.loop import Loop
from salvo.net.mqtt import Broker, new_client
from salvo.tools.localbroker import free_port, wait_listening
from salvo.web.audience import Feed
from salvo.web.spectate import Hub, SpectatorServer, subscriptions

from chromium import SHOTS, chromium
from kit import COLUMNS, ROWS, all_cells
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder, Team, wait_until

Event = tuple[str, Any]  # (event type, decoded JSON data)


class Stream:
    """An HTTP client reading ``/events``, one server-sent event at a time."""

    def __init__(self, server: SpectatorServer, timeout: float = 10) -> None:
        self.resp = urllib.request.urlopen(server.url + "events", timeout=timeout)
        assert self.resp.headers["Content-Type"].startswith("text/event-stream")

    def next(self) -> Event:
        kind, data = "message", list[str]()
        while True:
            line = self.resp.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\n")
            if not text:  # blank line: the event is complete
                if data:
                    return kind, json.loads("\n".join(data))
                kind = "message"
            elif not text.startswith(":"):  # ":..." is a comment (heartbeat)
                name, _, value = text.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    kind = value
                elif name == "data":
                    data.append(value)

    def until(self, pred: Callable[[Event], bool], timeout: float = 10) -> list[Event]:
        """Every event up to and including the first one ``pred`` accepts."""
        seen: list[Event] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            seen.append(self.next())
            if pred(seen[-1]):
                return seen
        raise AssertionError(f"nothing expected within {timeout}s; saw {seen}")

    def close(self) -> None:
        self.resp.close()


def on(topic: str, payload: str | None = None) -> Callable[[Event], bool]:
    return lambda e: e[0] == "message" and e[1]["topic"] == topic and payload in (None, e[1]["payload"])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    """A broker of the page's own: its screenshot shows this game alone."""
    mosq = Mosquitto(tmp_path_factory.mktemp("spectate-broker"))
    mosq.start()
    yield mosq
    mosq.stop()


@contextlib.contextmanager
def spectator_servers() -> Iterator[Callable[..., SpectatorServer]]:
    """``start(address, broker, hub)``: a started spectator server, closed at the end."""
    servers: list[SpectatorServer] = []

    def start(
        address: tuple[str, int] = ("127.0.0.1", 0), broker: Broker | None = None, hub: Hub | None = None
    ) -> SpectatorServer:
        server = SpectatorServer(address, broker, hub)
        server.start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.close()


@pytest.fixture
def serve(broker: Mosquitto) -> Iterator[Callable[..., SpectatorServer]]:
    """``serve()``: a spectator server reading the test broker anonymously."""
    with spectator_servers() as start:

        def reading(address: tuple[str, int] = ("127.0.0.1", 0), broker_url: str | None = None) -> SpectatorServer:
            return start(address, Broker.from_url(broker_url or broker.url()))

        yield reading


@pytest.fixture
def tidy(watcher: Recorder) -> Iterator[Recorder]:
    """The watcher, and this arena's retained topics cleared afterwards (the
    browser test's screenshots show its own game alone)."""
    yield watcher
    for topic in {m.topic for m in watcher.messages if m.retain}:
        watcher.publish(topic, "", retain=True)


def test_the_server_hands_out_the_page_and_nothing_else() -> None:
    server = SpectatorServer(("127.0.0.1", 0), None)
    server.start()
    try:
        page = urllib.request.urlopen(server.url, timeout=5).read().decode()
        assert "<title>salvo" in page
        scripts = ("spectate.js", "board.js", "replay", "replay.js")
        body = page + "".join(urllib.request.urlopen(server.url + f, timeout=5).read().decode() for f in scripts)
        assert 'new EventSource("events")' in body
        # No MQTT in the browser, no broker address to fill in.
        assert "WebSocket" not in body and "9001" not in body and "__SALVO" not in body
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(server.url + "../etc/passwd", timeout=5)
    finally:
        server.close()


def test_the_server_reads_only_public_topics() -> None:
    subs = subscriptions()
    assert {"/game/state", "/+/game/record", "/+/players/+/defeated", "/tournament/standings"} <= set(subs)
    private = ("request_participation", "/hit", "/error", "/approved", "/fire", "/place")
    assert not [f for f in subs if f.endswith(private)]
    # Public, but no page shows them: not read at all (a flood of reports is nobody's to stream).
    assert not {"/game/errors", "/+/game/errors", "/+/game/hits", "/+/game/id", "/+/players/count"} & set(subs)
    # Nothing else under /tournament: a team can write there (/+/players/+/fire with "tournament" as the prefix)
    assert [f for f in subs if "#" in f] == []
    assert [f for f in subs if f.startswith("/tournament")] == ["/tournament/standings", "/tournament/schedule"]


def test_a_stream_sends_the_retained_state_then_live_messages(
    serve: Callable[..., SpectatorServer], tidy: Recorder, prefix: str
) -> None:
    watcher = tidy
    p = f"/{prefix}"
    watcher.publish(f"{p}/players/list", '["alice","bob"]', retain=True)
    watcher.publish(f"{p}/game/state", "lobby", retain=True)
    watcher.publish(f"{p}/players/alice/ships/carrier/approved", "true", retain=True)  # private
    server = serve()
    wait_until(lambda: {f"{p}/players/list", f"{p}/game/state"} <= server.hub.snapshot().keys(), what="the state")
    stream = Stream(server)
    try:
        pending = {f"{p}/players/list", f"{p}/game/state"}

        def last_of_snapshot(e: Event) -> bool:
            pending.discard(e[1].get("topic"))
            return not pending

        seen = stream.until(last_of_snapshot)
        assert seen[0][0] == "status" and seen[0][1].items() >= {"broker": "up", "reset": True}.items()
        assert abs(seen[0][1]["now"] - time.time()) < 60  # the server's clock, for the countdowns
        mine = {e[1]["topic"]: e[1] for e in seen if e[0] == "message" and e[1]["topic"].startswith(p)}
        assert mine == {
            f"{p}/players/list": {"topic": f"{p}/players/list", "payload": '["alice","bob"]', "retained": True},
            f"{p}/game/state": {"topic": f"{p}/game/state", "payload": "lobby", "retained": True},
        }
        # Live: a plain message, then a retained one cleared.
        watcher.publish(f"{p}/game/current", "bob")
        assert stream.until(on(f"{p}/game/current"))[-1][1] == {
            "topic": f"{p}/game/current",
            "payload": "bob",
            "retained": False,
        }
        watcher.publish(f"{p}/game/state", "", retain=True)
        assert stream.until(on(f"{p}/game/state"))[-1][1] == {
            "topic": f"{p}/game/state",
            "payload": "",
            "retained": True,
        }
        watcher.publish(f"{p}/game/winner", "alice", retain=True)
        stream.until(on(f"{p}/game/winner", "alice"))
    finally:
        stream.close()
    # A new stream's snapshot (oldest update first) no longer has the cleared
    # topic: it would come before the winner, published after the clear.
    fresh = Stream(server)
    try:
        seen = fresh.until(on(f"{p}/game/winner", "alice"))
        topics = [e[1]["topic"] for e in seen if e[0] == "message" and e[1]["topic"].startswith(p)]
        assert topics == [f"{p}/players/list", f"{p}/game/winner"]
        assert f"{p}/game/state" not in server.hub.snapshot()
        assert f"{p}/players/alice/ships/carrier/approved" not in server.hub.snapshot()
    finally:
        fresh.close()


def test_a_new_broker_connection_resets_every_stream(
    broker: Mosquitto, serve: Callable[..., SpectatorServer], tidy: Recorder, prefix: str
) -> None:
    watcher = tidy
    p = f"/{prefix}"
    watcher.publish(f"{p}/game/state", "turn", retain=True)
    server = serve()
    stream = Stream(server, timeout=40)
    try:
        stream.until(on(f"{p}/game/state", "turn"))
        broker.stop()
        assert stream.until(lambda e: e[0] == "status", 20)[-1][1].items() >= {"broker": "down", "reset": False}.items()
        broker.start()
        # The server reconnects and resubscribes: a reset, then the retained state again.
        assert stream.until(lambda e: e[0] == "status", 30)[-1][1].items() >= {"broker": "up", "reset": True}.items()
        stream.until(on(f"{p}/game/state", "turn"))
    finally:
        stream.close()


def test_a_topic_cleared_while_the_server_was_away_is_forgotten(
    broker: Mosquitto, serve: Callable[..., SpectatorServer], tidy: Recorder, prefix: str
) -> None:
    p = f"/{prefix}"
    tidy.publish(f"{p}/game/state", "turn", retain=True)
    tidy.publish(f"{p}/game/winner", "", retain=True)
    server = serve()
    assert server.feed is not None
    wait_until(lambda: f"{p}/game/state" in server.hub.snapshot(), what="the state")
    # A client taking over the server's client id cuts its connection; paho
    # waits a second before it reconnects, and the topic is cleared meanwhile.
    thief = new_client(Broker.from_url(broker.url()), server.feed.client_id)
    thief.connect("127.0.0.1", broker.port)
    thief.loop_start()
    try:
        wait_until(lambda: not server.hub.broker_up, what="the server's connection cut")
        tidy.publish(f"{p}/game/state", "", retain=True)
        tidy.publish(f"{p}/game/winner", "alice", retain=True)
    finally:
        thief.disconnect()  # before the server comes back: they would take turns
        thief.loop_stop()
    wait_until(lambda: server.hub.snapshot().get(f"{p}/game/winner") == "alice", 15, "the server back")
    assert f"{p}/game/state" not in server.hub.snapshot()


def test_a_feed_on_a_loop_sends_the_history_before_what_the_broker_replays(
    broker: Mosquitto, tidy: Recorder, prefix: str
) -> None:
    """The director's projector reads the broker on the referee's loop (no
    paho thread), and reads the games' salvos so far off that loop: what the
    broker replays meanwhile is held back, so a stream open at the time gets
    the history first, as with a feed on a thread of its own."""
    p = f"/{prefix}"
    tidy.publish(f"{p}/game/salvo", "s2", retain=True)
    tidy.publish(f"{p}/game/state", "turn", retain=True)
    loop = Loop()
    thread = threading.Thread(target=loop.run, name="test-loop", daemon=True)
    thread.start()

    def history() -> list[tuple[str, str]]:
        for _ in range(3):  # the loop reads on meanwhile: the broker's replay comes in before this returns
            turned = threading.Event()
            loop.call_soon_threadsafe(turned.set)
            assert turned.wait(5)
        return [(f"{p}/game/salvo", "s0"), (f"{p}/game/salvo", "s1")]

    hub = Hub()
    attached = hub.attach()
    assert attached is not None
    stream, _start = attached
    paho_threads = [t for t in threading.enumerate() if t.name.startswith("paho-mqtt-client")]
    feed = Feed(hub, Broker.from_url(broker.url()), history, loop=loop)
    feed.start()
    try:
        heard: list[tuple[str, str]] = []
        replayed = [(f"{p}/game/salvo", "s2"), (f"{p}/game/state", "turn")]
        while not all(r in heard for r in replayed):
            heard += _payloads([stream.queue.get(timeout=10) or b""])
        mine = [h for h in heard if h[0].startswith(p)]
        assert mine[:2] == [(f"{p}/game/salvo", "s0"), (f"{p}/game/salvo", "s1")]  # then the broker's replay
        assert [t for t in threading.enumerate() if t.name.startswith("paho-mqtt-client")] == paho_threads
    finally:
        feed.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_the_hub_remembers_a_bounded_number_of_topics() -> None:
    hub = Hub(max_topics=3, max_bytes=10_000)
    for i in range(5):
        hub.message(f"/a{i}/game/winner", b"x", retained=True)
    hub.message("/a2/game/winner", b"y", retained=True)  # an update makes a topic the newest
    hub.message("/a/game/current", b"z", retained=False)  # a plain message is not state
    kept = [("/a3/game/winner", "x"), ("/a4/game/winner", "x"), ("/a2/game/winner", "y")]
    assert list(hub.snapshot().items()) == kept
    hub.message("/big/game/winner", b"b" * 9_900, retained=True)  # over the byte budget: the oldest go
    assert list(hub.snapshot()) == ["/big/game/winner"]


def _payloads(events: list[bytes]) -> list[tuple[str, str]]:
    """(topic, payload) of the message events among ``events``."""
    found = []
    for event in events:
        if event.startswith(b"data: "):
            doc = json.loads(event.split(b"data: ", 1)[1])
            found.append((doc["topic"], doc["payload"]))
    return found


def test_a_page_opened_mid_game_gets_the_games_salvos_and_sinks_first() -> None:
    hub = Hub(clock=lambda: 1234.5)
    salvo = [f'{{"turn":{t},"player":"alice","shots":5,"hits":1}}'.encode() for t in (1, 2, 3)]
    hub.message("/a/game/state", b"turn", retained=True)
    hub.message("/a/game/salvo", salvo[0], retained=True)
    hub.message("/a/players/bob/ships/boat/sunk", b"true", retained=True)
    hub.message("/a/game/salvo", salvo[1], retained=True)
    hub.message("/game/salvo", salvo[2], retained=True)  # the unprefixed arena: a history of its own
    attached = hub.attach()
    assert attached is not None
    _, start = attached
    assert json.loads(start[0].split(b"data: ", 1)[1]) == {"broker": "down", "reset": True, "now": 1234.5}
    history = [("/a/game/salvo", salvo[0].decode()), ("/a/players/bob/ships/boat/sunk", "true")]
    history += [("/a/game/salvo", salvo[1].decode()), ("/game/salvo", salvo[2].decode())]
    # The history (in the order heard), then the retained state.
    assert _payloads(start)[:4] == history
    assert _payloads(start)[4:] == list(hub.snapshot().items())
    hub.message("/a/game/state", b"lobby", retained=True)  # the next game: its history starts empty
    attached = hub.attach()
    assert attached is not None
    assert _payloads(attached[1])[:1] == [("/game/salvo", salvo[2].decode())]
    hub.connected()  # back from a lost broker connection: nothing heard before counts
    attached = hub.attach()
    assert attached is not None
    assert [t for t, _ in _payloads(attached[1])] == []
    assert json.loads(hub.tick().split(b"data: ", 1)[1]) == {"now": 1234.5}
    hub.close()  # the server stops: a browser reconnecting meanwhile gets no stream to hold it up
    assert hub.attach() is None


def test_a_seeded_history_comes_first_and_nothing_is_counted_twice() -> None:
    """The director's hub, started mid-game, is given the game's salvos and
    sinks so far (from the journal) before the broker's retained state: a
    page gets each once, in the order published, whether it opened before or after."""
    hub = Hub(clock=lambda: 1.0)
    salvo = [f'{{"turn":{t},"player":"alice","shots":5,"hits":1}}' for t in (1, 2, 3, 4)]
    sink = ("/a/players/bob/ships/boat/sunk", "true")
    attached = hub.attach()
    assert attached is not None
    early, _ = attached
    hub.message("/b/game/salvo", salvo[0].encode(), retained=True)  # another arena, heard already
    hub.seed([("/a/game/salvo", salvo[0]), sink, ("/a/game/salvo", salvo[1]), ("/b/game/salvo", salvo[0])])
    # Then the broker's retained state: the last salvo and the sink again; then the game goes on.
    hub.message("/a/game/salvo", salvo[1].encode(), retained=True)
    hub.message(sink[0], sink[1].encode(), retained=True)
    hub.message("/a/game/salvo", salvo[2].encode(), retained=True)
    whole = [("/a/game/salvo", salvo[0]), sink, ("/a/game/salvo", salvo[1]), ("/a/game/salvo", salvo[2])]
    attached = hub.attach()
    assert attached is not None
    assert [m for m in _payloads(attached[1]) if m[0].startswith("/a/")][:4] == whole
    assert [m for m in _payloads(attached[1]) if m[0].startswith("/b/")][:1] == [("/b/game/salvo", salvo[0])]
    sent = []
    while not early.queue.empty():
        event = early.queue.get_nowait()
        assert event is not None
        sent.append(event)
    heard = [(t, p) for t, p in _payloads(sent) if t.startswith("/a/")]
    assert heard[:3] == whole[:3]  # the seed, live, to the page already open
    assert sorted(set(heard)) == sorted(whole)  # then the retained ones again (the page keeps each once)
    hub.message("/a/game/salvo", salvo[3].encode(), retained=True)
    hub.message("/a/game/state", b"lobby", retained=True)
    attached = hub.attach()
    assert attached is not None
    assert [p for t, p in _payloads(attached[1]) if t == "/a/game/salvo"] == [salvo[3]]  # the retained one alone


def test_the_nights_games_are_listed_for_the_replay_viewer() -> None:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from salvo.web.spectate import Projector

    def record(game: str, winner: str) -> bytes:
        doc = {"game": game, "players": ["alice", "bob"], "fleets": {}, "salvos": [], "winner": winner}
        return json.dumps({**doc, "termination": "defeat"}).encode()

    projector = Projector(None, Hub(clock=lambda: 1800.0))
    projector.hub.message("/arena1/game/record", record("g-1", "alice"), retained=True)
    projector.hub.message("/arena2/game/record", record("g-2", "bob"), retained=True)
    projector.hub.message("/arena1/game/record", b"", retained=True)  # cleared at reset: still listed
    projector.hub.message("/arena1/game/record", b"not a record", retained=True)
    with TestClient(Starlette(routes=projector.routes())) as client:
        games = client.get("/records").json()
        ended = {"termination": "defeat", "at": 1800.0}
        assert games == [
            {"game": "g-2", "players": ["alice", "bob"], "winner": "bob", "arena": "arena2", **ended},
            {"game": "g-1", "players": ["alice", "bob"], "winner": "alice", "arena": "arena1", **ended},
        ]
        assert client.get("/record?game=g-1").json()["winner"] == "alice"
        assert client.get("/record?arena=arena1").status_code == 404  # its current record is gone


def test_a_stalled_browser_is_dropped_without_holding_up_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    import salvo.web.webserver

    monkeypatch.setattr(salvo.web.webserver, "UNACKED_LIMIT_MS", 2000)  # the kernel cuts it after 2 s, not 30
    hub = Hub(queue_size=64)
    server = SpectatorServer(("127.0.0.1", 0), None, hub=hub)
    server.start()
    stalled = socket.create_connection(("127.0.0.1", server.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")  # and never reads a byte
    reader = Stream(server)
    try:
        reader.until(lambda e: e[0] == "status")
        wait_until(lambda: hub.clients == 2, what="the stalled browser attached")
        feeding = 0.0
        received: list[str] = []
        # 400 x 50 kB: far more than the stalled socket's buffers and queue
        # hold. Fed in batches the reader keeps up with, like a live game.
        for batch in range(20):
            started = time.monotonic()
            for i in range(batch * 20, batch * 20 + 20):
                hub.message("/a/game/current", str(i).encode() + b" " * 50_000, retained=False)
            feeding += time.monotonic() - started
            events = reader.until(on("/a/game/current", str(batch * 20 + 19) + " " * 50_000))
            received += [e[1]["payload"].strip() for e in events if e[0] == "message"]
        assert received == [str(i) for i in range(400)]
        assert feeding < 5  # the feeding (MQTT) thread was never held up
        assert hub.clients == 1  # the stalled one was dropped
        # ... and its connection, stuck in a write that never completes, is
        # cut: it holds no stream (nor its buffers, nor a descriptor) for good.
        wait_until(lambda: sum(server.projector.streams.values()) == 1, 30, "the stalled connection cut")
    finally:
        reader.close()
        stalled.close()
        server.close()


def test_one_address_cannot_take_every_stream() -> None:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from salvo.web.spectate import MAX_PER_ADDRESS, Projector

    projector = Projector(None, Hub(clock=lambda: 1800.0))
    projector.streams["10.0.0.7"] = MAX_PER_ADDRESS  # one laptop holds its share
    projector.streams["testclient"] = MAX_PER_ADDRESS  # TestClient's address
    assert projector._refuse("10.0.0.7") == f"at most {MAX_PER_ADDRESS} streams from one address"
    assert projector._refuse("10.0.0.8") is None  # the projector, elsewhere, still gets in
    projector.streams["127.0.0.1"] = MAX_PER_ADDRESS
    assert projector._refuse("127.0.0.1") is None  # this laptop's own screens are not capped
    with TestClient(Starlette(routes=projector.routes())) as client:
        refused = client.get("/events")
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "10"
        # A HEAD would hold a stream that never sends a byte, so is never cut: it gets none.
        head = client.head("/events")
        assert head.status_code == 200 and head.content == b""
    assert projector.streams == {"10.0.0.7": 16, "testclient": 16, "127.0.0.1": 16}
    projector.max_streams = 32  # the venue's streams, all addresses together
    assert projector._refuse("10.0.0.8") == "too many spectators"
    assert projector._refuse("127.0.0.1") is None  # the laptop's own screen still gets in


def test_idle_connections_are_closed_and_one_address_holds_only_so_many(monkeypatch: pytest.MonkeyPatch) -> None:
    import salvo.web.webserver

    monkeypatch.setattr(salvo.web.webserver, "REQUEST_S", 0.5)
    monkeypatch.setattr(salvo.web.webserver, "PER_ADDRESS", 3)
    server = SpectatorServer(("127.0.0.1", 0), None).start()
    opened: list[socket.socket] = []

    def connect() -> socket.socket:
        opened.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        return opened[-1]

    try:
        # A connection that never sends a request is closed (not held for good).
        assert connect().recv(1) == b""  # recv waits: the server closes it after REQUEST_S
        # One venue address may hold 3 connections; a 4th is closed at once.
        monkeypatch.setattr(salvo.web.webserver, "loopback", lambda address: False)
        monkeypatch.setattr(salvo.web.webserver, "REQUEST_S", 30.0)
        three = [connect() for _ in range(3)]
        assert connect().recv(1) == b""
        three[0].sendall(b"GET /spectate.css HTTP/1.1\r\nHost: x\r\n\r\n")  # the three still work
        assert three[0].recv(12) == b"HTTP/1.1 200"
    finally:
        for sock in opened:
            sock.close()
        server.close()


def test_cli_refuses_a_bad_broker_url() -> None:
    result = CliRunner().invoke(main, ["spectate", "--broker", "http://x:1883"])
    assert result.exit_code == ExitCode.USAGE and "--broker" in result.output


def test_cli_stops_when_the_broker_refuses_its_credentials(broker: Mosquitto, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("signal.signal", lambda *_: None)  # leave pytest's SIGTERM alone
    args = ["spectate", "--port", "0", "--broker", broker.url(), "--username", "alice", "--password", "wrong"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.BROKER_REFUSED, result.output
    assert "refused" in result.output


def test_spectate_stops_within_two_seconds_of_sigterm_with_streams_open(tmp_path: Path) -> None:
    """`salvo spectate` is a container's PID 1 (`docker compose stop` sends
    SIGTERM, and PID 1 gets no signal its handler does not take): it stops
    cleanly within 2 s, its event streams open, even while it is still
    waiting for its broker's first answer (here a port that takes the
    connection and never says a word: a frozen broker)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = free_port()
        broker = f"mqtt://127.0.0.1:{silent.getsockname()[1]}"
        with (tmp_path / "spectate.log").open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "salvo", "spectate", "--port", str(port), "--broker", broker], stderr=log
            )
            try:
                wait_listening([port], lambda: None if proc.poll() is None else "salvo spectate exited")
                streams = [urllib.request.urlopen(f"http://127.0.0.1:{port}/events", timeout=10) for _ in range(3)]
                assert all(s.readline() == b"retry: 2000\n" for s in streams)
                sent = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(15)
                took = time.monotonic() - sent
            finally:
                if proc.poll() is None:
                    proc.kill()
    assert code == 0, (tmp_path / "spectate.log").read_text()  # its own handler, not the signal's default
    assert took < 2, f"{took:.1f} s"
    for stream in streams:
        stream.read()  # ended, not cut (that raises IncompleteRead)
        stream.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = chromium(tmp_path / "chromium", 1400, 900)
    yield driver
    driver.quit()


def _text(driver: Any, selector: str) -> str:
    """innerText of the first match, read in one step: the page redraws its
    elements on every message, so a found element can go stale at once."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
    return str(driver.execute_script(script, selector))


def _card_text(driver: Any, prefix: str) -> str:
    return _text(driver, f'article[data-arena="{prefix}"]')


def _connections(driver: Any) -> int:
    return int(driver.execute_script("return window.salvoConnections || 0"))


def _until(driver: Any, what: str, check: Any, timeout: float = 20) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: check())
    except Exception:
        SHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SHOTS / "spectate-failure.png"))
        raise AssertionError(f"the page never showed {what}; it shows:\n{_text(driver, 'body')}") from None


def test_the_page_follows_a_live_game_in_chromium(
    broker: Mosquitto,
    serve: Callable[..., SpectatorServer],
    start_referee: Any,
    make_team: Any,
    watcher: Recorder,
    prefix: str,
    browser: Any,
) -> None:
    server = serve()
    browser.get(server.url)
    _until(browser, "the live connection", lambda: _text(browser, "#conn") == "live")
    start_referee(turn_timeout=15, reset_after=60, seed=3)
    _until(browser, "the arena in its lobby", lambda: "LOBBY" in _card_text(browser, prefix).upper())

    fleets = {"alice": ROWS, "bob": COLUMNS}
    teams: dict[str, Team] = {n: make_team(n) for n in fleets}
    for team in teams.values():
        team.join()
    watcher.wait_for(f"/{prefix}/players/count", "2")
    for name, team in teams.items():
        team.place_fleet(fleets[name])
    first = watcher.wait(lambda m: m.topic.endswith("/game/turn")).json()["player"]
    other = next(n for n in fleets if n != first)
    _until(browser, "turn 1", lambda: f"Turn 1: {first} fires 5 shots" in _card_text(browser, prefix))
    current = f'article[data-arena="{prefix}"] tr.current[data-player="{first}"]'
    _until(browser, "the current player marked", lambda: _text(browser, current))  # /game/current comes after /turn
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "spectate-turn.png"))

    # `first` shoots the other fleet cell by cell (then water, to fill its
    # last salvo); `other` only finds water.
    def water(fleet: dict[str, Any]) -> list[tuple[int, int]]:
        return [(x, y) for y in range(10) for x in range(10) if (x, y) not in all_cells(fleet)]

    aims = {first: iter(all_cells(fleets[other]) + water(fleets[other])), other: iter(water(fleets[first]))}
    turn = 1

    def turn_or_winner(m: Msg) -> bool:
        if not m.payload:
            return False
        return m.topic.endswith("/game/winner") or (m.topic.endswith("/game/turn") and m.json()["turn"] == turn)

    while True:
        msg = watcher.wait(turn_or_winner)
        if msg.topic.endswith("/game/winner"):
            break
        info = msg.json()
        shooter = info["player"]
        for _ in range(info["shots"]):
            teams[shooter].fire(other if shooter == first else first, *next(aims[shooter]), turn=info["turn"])
        if turn == 1:
            _until(
                browser,
                "turn 1's salvo",
                lambda: f"Last salvo: {first}, 5 hits of 5" in _card_text(browser, prefix),
            )
            _until(browser, "the carrier sunk", lambda: f"{other}'s carrier sunk" in _card_text(browser, prefix))
        turn += 1
    last_turn = turn - 1

    _until(browser, "the winner", lambda: f"Winner: {first}" in _card_text(browser, prefix))
    _until(browser, "the final turn", lambda: f"Game over after turn {last_turn}" in _card_text(browser, prefix))
    loser = _text(browser, f'article[data-arena="{prefix}"] tr.defeated[data-player="{other}"]')
    assert loser.split()[:3] == [other, "0", "0"]  # no ship left, none sunk of the other's
    won = _text(browser, f'article[data-arena="{prefix}"] tr.won[data-player="{first}"]')
    assert won.split()[:3] == [first, "5", "5"]  # every ship left, five of the other's sunk
    _until(browser, "the defeat", lambda: f"{other} is defeated" in _card_text(browser, prefix))

    standings = {
        "format": "round-robin",
        "rounds": 1,
        "games_played": 1,
        "table": [
            {
                "team": first,
                "played": 1,
                "wins": 1,
                "draws": 0,
                "losses": 0,
                "points": 2,
                "shots": 17,
                "hits": 17,
                "accuracy": 1.0,
            },
            {
                "team": other,
                "played": 1,
                "wins": 0,
                "draws": 0,
                "losses": 1,
                "forfeits": 1,
                "withdrawn": True,
                "points": 0,
                "shots": 15,
                "hits": 0,
                "accuracy": 0.0,
            },
        ],
    }
    watcher.publish("/tournament/standings", json.dumps(standings), retain=True)
    _until(browser, "the standings", lambda: "1 game played" in _text(browser, "#standings"))
    top = _text(browser, "#standings tbody tr").split()
    assert top == ["1", first, "2", "1-0-0", "0", "–"]  # points, W-D-L, forfeits, no Buchholz yet
    second = _text(browser, "#standings tbody tr:nth-child(2)").split()
    assert second == ["2", other, "(withdrawn)", "0", "0-0-1", "1", "–"]  # L 1, of it F 1: forfeits show
    browser.save_screenshot(str(SHOTS / "spectate-winner.png"))

    # The broker restarts during the evening: the server reconnects and
    # resubscribes, and the page starts over from the replayed retained state.
    assert _connections(browser) == 1
    broker.restart()
    _until(browser, "the broker's loss", lambda: _text(browser, "#conn").startswith("the server lost the broker"))
    _until(browser, "a reconnection", lambda: _connections(browser) == 2, 30)
    _until(browser, "the winner again", lambda: f"Winner: {first}" in _card_text(browser, prefix))
    _until(browser, "the standings again", lambda: "1 game played" in _text(browser, "#standings"))

    # The spectator server restarts; meanwhile the standings are cleared. The
    # page's EventSource reconnects by itself and shows the new state.
    address = ("127.0.0.1", server.port)
    server.close()
    _until(browser, "the server's loss", lambda: _text(browser, "#conn").startswith("lost the server"))
    watcher.publish("/tournament/standings", "", retain=True)
    serve((str(address[0]), int(address[1])))
    _until(browser, "a reconnection to the new server", lambda: _connections(browser) == 3, 30)
    _until(browser, "the standings gone", lambda: "No tournament running." in _text(browser, "#standings"))
    _until(browser, "the winner once more", lambda: f"Winner: {first}" in _card_text(browser, prefix))
