"""The third review of the director's web server, attack by attack, against
a real server (a spectator server or the console, uvicorn on real sockets)
and, where the broker matters, the session's mosquitto with the shipped
configuration and a real referee. docs/security.md section 14 tells the
story; the flood figures come from tests/test_webserver_floods.py."""

from __future__ import annotations

import collections
import http.client
import logging
import select
import socket
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from console_fake import FakeDirector
from salvo.net.mqtt import Broker
from salvo.organiser import tls
from salvo.organiser.console import Console
from salvo.web import weblog
from salvo.web.spectate import SpectatorServer

from conftest import RefereeFactory
from mosquitto import Mosquitto
from mqttkit import Recorder, wait_until
from webkit import SSE, connect, on, venue

PASSWORD = "correct horse battery"


@pytest.fixture
def mallory(broker: Mosquitto) -> Iterator[Recorder]:
    """A registered team's login (it may write every fire topic)."""
    rec = Recorder(broker, "mallory", [])
    yield rec
    rec.close()


# -- 1. a junk flood copied to every spectator -----------------------------------------------------


def test_a_flood_of_error_reports_reaches_no_stream(
    broker: Mosquitto, start_referee: RefereeFactory, watcher: Recorder, mallory: Recorder, prefix: str
) -> None:
    """Junk at a fire topic makes the referee report on the public
    /game/errors, up to 200 a second; no page shows those reports, so the
    projector's stream carries none of them (before: every one, to every
    stream)."""
    p = f"/{prefix}"
    start_referee()
    watcher.wait_for(f"{p}/game/state", "lobby")
    server = SpectatorServer(("127.0.0.1", 0), Broker.from_url(broker.url())).start()
    stream = None
    try:
        wait_until(lambda: server.hub.snapshot().get(f"{p}/game/state") == "lobby", what="the lobby in the hub")
        stream = SSE(server.port)
        stream.until(on(f"{p}/game/state", "lobby"))  # the snapshot: what follows is live
        flood = 150  # within the referee's burst of reports: every one is published
        mark = watcher.mark()
        for i in range(flood):
            mallory.client.publish(f"{p}/players/bob/fire", f"junk {i}", qos=1)
        wait_until(lambda: len(watcher.on(f"{p}/game/errors", after=mark)) >= flood, what="the referee's reports")
        # Published after the broker sent every report on: the hub hears it after them.
        watcher.publish(f"{p}/game/current", "marker")
        seen = stream.until(on(f"{p}/game/current", "marker"))
        reports = [e for e in seen if e[0] == "message" and e[1]["topic"].endswith("/game/errors")]
        assert reports == [], f"{len(reports)} error reports streamed"
        assert f"{p}/game/errors" not in server.hub.snapshot()
    finally:
        if stream is not None:
            stream.close()
        server.close()


# -- 3. the login hold-off, bypassed by guessing all at once ---------------------------------------


def _status(sock: socket.socket) -> int:
    """The status code of the answer on ``sock`` (its first line)."""
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(64)
        assert chunk, "the connection closed without an answer"
        head += chunk
    return int(head.split(b" ", 2)[1])


def test_guesses_sent_at_once_are_held_off_like_one_after_the_other() -> None:
    """60 guesses from one address, every one in the console's hands before
    any is judged (their heads sent, their bodies held back); the right
    password is guess 50. Five are judged, the other 55 held off (before: 59
    wrong ones judged and the 50th logged in)."""
    guesses = [PASSWORD if i == 49 else f"guess number {i}" for i in range(60)]
    with Console(FakeDirector(), "127.0.0.1", 0, PASSWORD) as console:
        socks = [connect(console.port) for _ in guesses]
        try:
            bodies = [f"password={g.replace(' ', '+')}".encode() for g in guesses]
            for sock, body in zip(socks, bodies, strict=True):
                sock.sendall(
                    b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                )
            # Each is in its handler now, past the hold-off's first look, waiting for its body.
            tasks = console.server.server_state.tasks
            wait_until(lambda: len(tasks) == len(guesses), what="every guess in the console's hands")
            for sock, body in zip(socks[:49], bodies[:49], strict=True):
                sock.sendall(body)
            first = [_status(sock) for sock in socks[:49]]
            for sock, body in zip(socks[49:], bodies[49:], strict=True):
                sock.sendall(body)
            rest = [_status(sock) for sock in socks[49:]]
        finally:
            for sock in socks:
                sock.close()
    assert collections.Counter(first) == {401: 5, 429: 44}, collections.Counter(first)
    assert rest == [429] * 11, rest  # the right password among them: no session


def test_the_right_password_gives_its_attempt_back() -> None:
    """The organiser logging in from several browsers is not held off: only
    attempts that were wrong stay counted."""
    from starlette.testclient import TestClient

    from salvo.organiser.console import create_app

    with TestClient(create_app(FakeDirector(), PASSWORD, secure=False, login_delay_s=0)) as client:
        for _ in range(4):
            assert client.post("/login", data={"password": "a guess"}).status_code == 401
        for _ in range(10):
            assert client.post("/login", data={"password": PASSWORD}, follow_redirects=False).status_code == 303
        assert client.post("/login", data={"password": "a guess"}).status_code == 401  # the fifth wrong one
        assert client.post("/login", data={"password": PASSWORD}, follow_redirects=False).status_code == 429


# -- 2. held request bodies fill the web server ----------------------------------------------------


def _held_login(sock: socket.socket) -> None:
    """A login whose body never comes (its head says 100 bytes; 10 are sent)."""
    sock.sendall(
        b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: 100\r\n\r\npassword=x"
    )


def test_a_request_must_come_whole_in_time_head_and_body(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, budget: object
) -> None:
    """A login whose body never comes, and a second request on a kept-alive
    connection that sends half its head, are closed (before: held for
    good, the handler waiting for the body); nothing is logged for them
    (with a new log budget: the first line of any kind would show)."""
    import salvo.web.webserver

    monkeypatch.setattr(salvo.web.webserver, "REQUEST_S", 0.5)
    with caplog.at_level(logging.WARNING), Console(FakeDirector(), "127.0.0.1", 0, PASSWORD) as console:
        held = connect(console.port, timeout=5)
        _held_login(held)
        assert held.recv(1) == b""  # recv waits: closed once the body is 0.5 s late (a timeout raises)
        kept = connect(console.port, timeout=5)
        kept.sendall(b"GET /login HTTP/1.1\r\nHost: x\r\n\r\n")  # a whole one: answered (405)
        assert _status(kept) == 405
        kept.sendall(b"GET / HTTP/1.1\r\nHo")  # the next: half a head
        while kept.recv(4096):  # the rest of the first answer, then the close
            pass
        wait_until(lambda: console.slots.timed_out == 2 and not console.slots.per_address, what="both let go")
        held.close()
        kept.close()
    # the web server's own loggers (another test's client retrying its stopped broker may log meanwhile)
    mine = ("uvicorn", "salvo.organiser.console", "salvo.web.spectate", "salvo.web.webserver", "salvo.web.weblog")
    assert not [r for r in caplog.records if r.name.startswith(mine)], caplog.text


def _settled(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server closed or answered."""
    return len(select.select(socks, [], [], 0)[0])


def test_the_venue_cannot_take_the_laptops_own_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four venue addresses hold every connection they may (logins whose
    bodies never come); the organiser's own browser still gets the console
    and logs in (before: 503 to both once the venue held the server's
    limit). Scaled down: 40 connections, 8 of them the laptop's."""
    import salvo.web.webserver

    monkeypatch.setattr(salvo.web.webserver, "MAX_CONNECTIONS", 40)
    monkeypatch.setattr(salvo.web.webserver, "LOOPBACK_SLOTS", 8)
    monkeypatch.setattr(salvo.web.webserver, "PER_ADDRESS", 16)
    monkeypatch.setattr(salvo.web.webserver, "REQUEST_S", 60.0)
    monkeypatch.setattr(salvo.web.webserver, "loopback", lambda address: address == "127.0.0.1")
    with Console(FakeDirector(), "127.0.0.1", 0, PASSWORD) as console:
        tasks = console.server.server_state.tasks
        flood: list[socket.socket] = []
        try:
            # One at a time, each held or shut before the next: the venue
            # holds all the server lets it, and the rest are turned away.
            for i in range(64):
                flood.append(connect(console.port, source=venue(i % 4)))
                _held_login(flood[-1])
                wait_until(lambda: _settled(flood) + len(tasks) == len(flood), what="the connection held or shut")
            laptop = connect(console.port)
            laptop.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _status(laptop) == 200
            body = f"password={PASSWORD.replace(' ', '+')}".encode()
            login = connect(console.port)
            login.sendall(
                b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert _status(login) == 303
            assert len(flood) - _settled(flood) == 32 == console.slots.venue  # the venue's share, held all along
            laptop.close()
            login.close()
        finally:
            for sock in flood:
                sock.close()


def test_silent_tls_connections_count_from_the_moment_they_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS uvicorn hears of a connection only once its handshake is
    done, and asyncio waits 60 s for one: connections that never start it
    were counted nowhere, so one venue address could hold thousands and use
    up the director's descriptors (before: all 300 held here; and in a
    burst, connections turned away after they reached uvicorn still counted
    against its 503 limit). Each now takes its slot when accepted."""
    import salvo.web.webserver

    monkeypatch.setattr(salvo.web.webserver, "PER_ADDRESS", 4)
    monkeypatch.setattr(salvo.web.webserver, "loopback", lambda address: address == "127.0.0.1")
    issued = tls.issue(tmp_path / "tls")
    cert, key = issued.server_cert, issued.server_key
    with Console(FakeDirector(), "127.0.0.1", 0, PASSWORD, certfile=cert, keyfile=key) as console:
        silent = [connect(console.port, source=venue(0), timeout=5) for _ in range(300)]
        try:
            wait_until(lambda: console.slots.refused == 296, what="the address's connections past its 4 turned away")
            assert console.slots.per_address == {venue(0): 4} and console.server.server_state.connections == set()
            assert _settled(silent) == 296  # closed at once, not held for the handshake's 60 s
            # The laptop (and another venue address) still get the console over TLS.
            context = ssl.create_default_context(cafile=str(issued.ca_cert))
            for source in ("127.0.0.1", venue(1)):
                conn = http.client.HTTPSConnection(
                    "127.0.0.1", console.port, timeout=5, source_address=(source, 0), context=context
                )
                conn.request("GET", "/")
                assert conn.getresponse().status == 200
                conn.close()
        finally:
            for sock in silent:
                sock.close()
        wait_until(lambda: not console.slots.per_address, what="every slot given back")


# -- 4. log flooding without a login ---------------------------------------------------------------


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> tuple[weblog.LogBudget, list[float]]:
    """The process's log budget, new, on a clock the test moves: ``(budget, [now])``."""
    now = [1000.0]
    fresh = weblog.LogBudget(clock=lambda: now[0])
    monkeypatch.setattr(weblog, "BUDGET", fresh)
    for name in weblog.LOGGERS:  # another server's budget stays on the loggers otherwise
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    return fresh, now


def test_a_flood_of_malformed_requests_is_summed_up_in_the_log(
    budget: tuple[weblog.LogBudget, list[float]], caplog: pytest.LogCaptureFixture
) -> None:
    """2,000 malformed requests to the console, no login: one line as it is
    and one with the count when the window ends (before: 2,000 lines)."""
    fresh, now = budget
    flood = 2000

    def malformed(port: int) -> int:
        with connect(port) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            return _status(sock)

    with caplog.at_level(logging.INFO), Console(FakeDirector(), "127.0.0.1", 0, PASSWORD) as console:
        with ThreadPoolExecutor(8) as pool:
            answers = collections.Counter(pool.map(malformed, [console.port] * flood))
        assert answers == {400: flood}  # each was logged before it was answered
        now[0] += weblog.WINDOW_S  # the window ends
        fresh.roll()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == [
        "Invalid HTTP request received.",
        f"{flood - 1} more like this from uvicorn.error in 10 s, not logged one by one: Invalid HTTP request received.",
    ], lines[:5]


def test_the_budget_keeps_kinds_apart_and_never_holds_back_info(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    budget = weblog.LogBudget(clock=lambda: now[0])
    said: list[str] = []
    monkeypatch.setattr(weblog.log, "warning", lambda msg, *args: said.append(msg % args))

    def record(name: str, level: int, msg: str, *args: object, exc: type[BaseException] | None = None) -> bool:
        info = (exc, exc(), None) if exc else None
        return budget.filter(logging.LogRecord(name, level, __file__, 1, msg, args, info))

    assert [record("uvicorn.error", logging.WARNING, "Invalid HTTP request received.") for _ in range(3)] == [
        True,
        False,
        False,
    ]
    assert record("salvo.organiser.console", logging.WARNING, "console: a wrong password from %s", "10.0.0.7")
    assert not record("salvo.organiser.console", logging.WARNING, "console: a wrong password from %s", "10.0.0.8")
    assert record("uvicorn.error", logging.ERROR, "Exception in ASGI application\n", exc=ValueError)
    assert record("uvicorn.error", logging.ERROR, "Exception in ASGI application\n", exc=KeyError)  # another kind
    assert all(record("salvo.organiser.console", logging.INFO, "console: %s logged in", "127.0.0.1") for _ in range(5))
    for i in range(weblog.MAX_KINDS):  # text that differs each time (asyncio's) cannot make kinds without end
        record("asyncio", logging.ERROR, f"accept failed {i}")
    assert not record("asyncio", logging.ERROR, "accept failed again")  # past the cap: one kind, "other"
    budget.roll()
    assert said == []  # the window is not over
    now[0] += weblog.WINDOW_S
    budget.roll()
    assert said == [  # the most held back first; of "other", the first one was logged
        "4 more like this from asyncio in 10 s, not logged one by one: other",
        "2 more like this from uvicorn.error in 10 s, not logged one by one: Invalid HTTP request received.",
        "1 more like this from salvo.organiser.console in 10 s, not logged one by one:"
        " console: a wrong password from %s",
    ]
    assert record("uvicorn.error", logging.WARNING, "Invalid HTTP request received.")  # a new window
