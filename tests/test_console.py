"""The organiser console without a browser: its Starlette application through
starlette's TestClient (login, sessions, CSRF, controls, exports), and the
Console server for real over HTTP and HTTPS (the live event stream, TLS and
the Secure cookie, stopping)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from console_fake import FakeDirector
from salvo.organiser import tls
from salvo.organiser.console import Console, ConsoleError, create_app
from salvo.organiser.console.app import COOKIE
from salvo.organiser.teams import add_team

from conftest import BrokerFactory
from mqttkit import wait_until

PASSWORD = "correct horse battery"


@pytest.fixture
def fake() -> FakeDirector:
    return FakeDirector()


@pytest.fixture
def client(fake: FakeDirector) -> Iterator[TestClient]:
    with TestClient(create_app(fake, PASSWORD, secure=False, login_delay_s=0)) as c:
        yield c


def csrf_of(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found, "the console page carries no CSRF token"
    return found.group(1)


def login(client: TestClient) -> str:
    """Log in through the form; the CSRF token of the console page."""
    r = client.post("/login", data={"password": PASSWORD}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    page = client.get("/")
    assert page.status_code == 200
    return csrf_of(page.text)


def test_a_weak_password_is_refused_before_anything_listens(fake: FakeDirector) -> None:
    for weak in ("", "1234567"):
        with pytest.raises(ConsoleError, match="password"):
            create_app(fake, weak, secure=False)
        with pytest.raises(ConsoleError, match="password"):
            Console(fake, "127.0.0.1", 0, weak)
    create_app(fake, "12345678", secure=False)  # eight characters are enough


def test_only_the_login_form_answers_without_a_session(client: TestClient, fake: FakeDirector) -> None:
    page = client.get("/")
    assert page.status_code == 200 and 'name="password"' in page.text
    assert "csrf-token" not in page.text and "arenas" not in page.text
    for method, path in [
        ("GET", "/api/status"),
        ("GET", "/api/events"),
        ("GET", "/export/games.csv"),
        ("GET", "/export/teams.csv"),
        ("GET", "/export/tournament.json"),
        ("POST", "/api/control"),
        ("POST", "/logout"),
    ]:
        r = client.request(method, path, json={"action": "pause", "args": {}})
        assert r.status_code == 401, (method, path)
        assert r.json()["code"] == "login_required"
    client.cookies.set(COOKIE, "forged")
    assert client.get("/api/status").status_code == 401
    assert fake.applied == []


def test_a_wrong_password_is_refused_and_repeated_ones_are_held_off(fake: FakeDirector) -> None:
    with TestClient(create_app(fake, PASSWORD, secure=False, login_delay_s=0.2)) as client:
        started = time.monotonic()
        r = client.post("/login", data={"password": "correct horse"}, follow_redirects=False)
        assert time.monotonic() - started >= 0.2  # a wrong password waits for its answer
        assert r.status_code == 401 and "Wrong password." in r.text and COOKIE not in r.headers.get("set-cookie", "")
        for _ in range(4):
            assert client.post("/login", data={"password": "guess"}).status_code == 401
        # Five wrong in a minute: even the right one waits now.
        r = client.post("/login", data={"password": PASSWORD}, follow_redirects=False)
        assert r.status_code == 429 and "Too many wrong passwords" in r.text
        assert 0 < int(r.headers["retry-after"]) <= 60
        assert client.get("/api/status").status_code == 401


def test_the_session_cookie_is_httponly_and_strict_and_the_page_locked_down(client: TestClient) -> None:
    r = client.post("/login", data={"password": PASSWORD}, follow_redirects=False)
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain HTTP here; see the TLS test
    assert "Max-Age=43200" in cookie  # the night (12 h), not until the browser closes
    page = client.get("/")
    nonce = re.search(r"<script nonce=\"([^\"]+)\">", page.text)
    assert nonce and f"script-src 'nonce-{nonce.group(1)}'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
    assert "<script src" not in page.text and "<link" not in page.text  # nothing from elsewhere
    assert "pause-game" in page.text  # the actions' help, for the buttons
    assert client.get("/").text != page.text  # a fresh nonce every time


def test_a_control_needs_the_pages_csrf_token_as_well_as_the_cookie(client: TestClient, fake: FakeDirector) -> None:
    csrf = login(client)
    body = {"action": "pause-game", "args": {"arena": "arena1"}}
    assert client.post("/api/control", json=body).json()["code"] == "csrf"  # the cookie alone
    assert client.post("/api/control", json=body, headers={"X-CSRF-Token": "guess"}).status_code == 403
    foreign = {"X-CSRF-Token": csrf, "Origin": "http://evil.example"}
    assert client.post("/api/control", json=body, headers=foreign).status_code == 403
    assert fake.applied == []
    r = client.post("/api/control", json=body, headers={"X-CSRF-Token": csrf, "Origin": "http://testserver"})
    assert r.status_code == 200
    assert (
        r.json()["action"] == "pause-game" and r.json()["args"] == {"arena": "arena1"} and r.json()["by"] == "console"
    )
    assert fake.applied == [("pause-game", {"arena": "arena1"}, "console")]
    assert client.get("/api/status").json()["arenas"][0]["paused"] is True


def test_a_refused_control_is_a_400_with_its_code_and_changes_nothing(client: TestClient, fake: FakeDirector) -> None:
    headers = {"X-CSRF-Token": login(client)}

    def control(body: Any) -> tuple[int, dict[str, Any]]:
        r = client.post("/api/control", content=json.dumps(body), headers=headers)
        return r.status_code, r.json()

    before = fake.status()
    assert control({"action": "resume", "args": {}}) == (
        400,
        {"code": "not_paused", "reason": "the tournament is not paused"},
    )
    assert control({"action": "pause-game", "args": {"arena": "arena4"}})[1]["code"] == "no_game"
    assert control({"action": "launch", "args": {}})[1]["code"] == "unknown_action"
    assert control({"action": "extra-time", "args": {"arena": "arena1"}}) == (
        400,
        {"code": "bad_arguments", "reason": "extra-time needs seconds"},
    )
    assert control({"action": "extra-time", "args": {"arena": "arena1", "seconds": "60"}})[1]["code"] == "bad_arguments"
    assert control({"action": "void-game", "args": {"game": True}})[1]["code"] == "bad_arguments"
    assert control({"action": "pause", "args": {"force": 1}})[1]["code"] == "bad_arguments"
    assert control(["pause"])[1]["code"] == "bad_request"
    r = client.post("/api/control", content=b"{not json", headers=headers)
    assert r.status_code == 400 and r.json()["code"] == "bad_request"
    assert fake.applied == [] and fake.status() == before
    # A reason may be left out (the director decides); an override names a winner.
    assert control({"action": "override", "args": {"game": 2, "winner": "fortran", "reason": "miscount"}})[0] == 200
    assert fake.status()["games"][2]["winner"] == "fortran"


def test_the_exports_download_what_the_director_exports(client: TestClient, fake: FakeDirector) -> None:
    login(client)
    games = client.get("/export/games.csv")
    assert games.status_code == 200 and games.headers["content-type"] == "text/csv; charset=utf-8"
    assert games.headers["content-disposition"] == 'attachment; filename="games.csv"'
    assert games.text == fake.export_csv("games") and games.text.startswith("game,round,arena,")
    teams = client.get("/export/teams.csv")
    assert teams.headers["content-type"] == "text/csv; charset=utf-8" and teams.text == fake.export_csv("teams")
    assert "rank,team,played" in teams.text
    whole = client.get("/export/tournament.json")
    assert whole.headers["content-type"] == "application/json"
    assert whole.headers["content-disposition"] == 'attachment; filename="tournament.json"'
    assert whole.json() == fake.export_json()
    assert client.get("/export/passwd").status_code == 404


def test_logging_out_ends_the_session(client: TestClient) -> None:
    csrf = login(client)
    assert client.post("/logout").status_code == 403  # logging someone out needs the page too
    r = client.post("/logout", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and f'{COOKIE}=""' in r.headers["set-cookie"]
    assert client.get("/api/status").status_code == 401
    assert 'name="password"' in client.get("/").text


# -- the server, for real ------------------------------------------------


@dataclass(frozen=True)
class _At:
    """A console in another process: only its port is known."""

    port: int


class Browserless:
    """An HTTP(S) client that keeps the console's cookie, like a browser would."""

    def __init__(self, console: Console | _At, context: ssl.SSLContext | None = None) -> None:
        self.console, self.context = console, context
        self.cookie = ""

    def connect(self, timeout: float = 10) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection("localhost", self.console.port, timeout=timeout, context=self.context)
        return http.client.HTTPConnection("127.0.0.1", self.console.port, timeout=timeout)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> http.client.HTTPResponse:
        conn = self.connect()
        # As a browser does on a POST: the page's own origin (checked by the console).
        origin = f"https://localhost:{self.console.port}" if self.context else f"http://127.0.0.1:{self.console.port}"
        sent = {"Cookie": self.cookie, **({"Origin": origin} if method == "POST" else {}), **(headers or {})}
        conn.request(method, path, body, sent)
        return conn.getresponse()

    def login(self) -> tuple[str, str]:
        """(the Set-Cookie header, the CSRF token)"""
        r = self.request(
            "POST", "/login", b"password=correct+horse+battery", {"Content-Type": "application/x-www-form-urlencoded"}
        )
        assert r.status == 303, r.read()
        set_cookie = r.headers["Set-Cookie"]
        self.cookie = set_cookie.split(";", 1)[0]
        return set_cookie, csrf_of(self.request("GET", "/").read().decode())


class Events:
    """The console's event stream, one event at a time."""

    def __init__(self, resp: http.client.HTTPResponse) -> None:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        self.resp = resp

    def next(self) -> tuple[str, Any]:
        kind, data = "message", ""
        while True:
            line = self.resp.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\n")
            if not text and data:
                return kind, json.loads(data)
            if text.startswith("event: "):
                kind = text.removeprefix("event: ")
            elif text.startswith("data: "):
                data = text.removeprefix("data: ")

    def until(self, check: Any, limit: int = 50) -> tuple[str, Any]:
        for _ in range(limit):
            event = self.next()
            if check(event):
                return event
        raise AssertionError(f"no matching event in {limit}")


@pytest.fixture
def console(fake: FakeDirector) -> Iterator[Console]:
    c = Console(fake, "127.0.0.1", 0, PASSWORD).start()
    yield c
    c.close()


def test_the_page_is_live_the_status_is_pushed_when_it_changes(console: Console, fake: FakeDirector) -> None:
    assert console.url == f"http://127.0.0.1:{console.port}/"
    user = Browserless(console)
    _, csrf = user.login()
    events = Events(user.request("GET", "/api/events"))
    kind, first = events.next()
    assert kind == "status" and first == fake.status()
    r = user.request(
        "POST",
        "/api/control",
        json.dumps({"action": "pause", "args": {}}).encode(),
        {"Content-Type": "application/json", "X-CSRF-Token": csrf},
    )
    assert r.status == 200, r.read()
    kind, now = events.until(lambda e: e[0] == "status")
    assert now["tournament"]["paused"] is True and now["audit"][-1]["action"] == "pause"
    # Logging out (in another tab) ends the stream.
    user.request("POST", "/logout", b"{}", {"X-CSRF-Token": csrf}).read()
    assert events.until(lambda e: e[0] == "logout") == ("logout", {})
    assert user.request("GET", "/api/events").status == 401


def test_streams_opened_all_at_once_stay_within_the_limit(console: Console) -> None:
    from salvo.organiser.console.app import MAX_STREAMS

    user = Browserless(console)
    user.login()
    # Every request is sent before any answer is read: the server sees them all at once.
    conns = [user.connect() for _ in range(MAX_STREAMS + 20)]
    for conn in conns:
        conn.request("GET", "/api/events", headers={"Cookie": user.cookie})
    kinds = []
    for conn in conns:
        r = conn.getresponse()
        kinds.append("refused" if r.status == 503 else Events(r).next()[0])
    assert kinds.count("status") == MAX_STREAMS, kinds
    assert len(kinds) - kinds.count("status") == 20 and set(kinds) <= {"status", "busy", "refused"}
    for conn in conns:
        conn.close()


def test_close_ends_open_streams_and_stops_within_two_seconds(fake: FakeDirector) -> None:
    console = Console(fake, "127.0.0.1", 0, PASSWORD).start()
    user = Browserless(console)
    user.login()
    events = Events(user.request("GET", "/api/events"))
    events.next()
    started = time.monotonic()
    console.close()
    assert time.monotonic() - started < 2
    with pytest.raises((EOFError, OSError)):
        events.until(lambda e: False, limit=1000)  # the stream ends
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", console.port), timeout=2).close()


def test_a_stream_ends_with_the_directors_last_word(fake: FakeDirector) -> None:
    """The director's last change (its last game recorded) right before it
    exits still reaches the page, then ``closing``: not the status of half a
    second before, looking normal ("8 of 9 games played")."""
    console = Console(fake, "127.0.0.1", 0, PASSWORD).start()
    user = Browserless(console)
    user.login()
    events = Events(user.request("GET", "/api/events"))
    assert events.next()[0] == "status"
    with fake.lock:
        fake.state["tournament"].update(games_played=28, games_left=0, done=True)
    console.close()
    kind, last = events.until(lambda e: e[0] == "status")
    assert kind == "status" and last["tournament"]["done"] is True
    assert events.until(lambda e: e[0] != "alive") == ("closing", {})


def test_a_busy_port_is_a_clear_error(fake: FakeDirector) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConsoleError, match=f"cannot listen on 127.0.0.1:{port}"):
            Console(fake, "127.0.0.1", port, PASSWORD).start()


def test_over_tls_the_console_answers_https_and_its_cookie_is_secure(tmp_path: Path, fake: FakeDirector) -> None:
    issued = tls.issue(tmp_path / "tls")
    with pytest.raises(ConsoleError, match="both a certificate and its key"):
        Console(fake, "127.0.0.1", 0, PASSWORD, certfile=issued.server_cert)
    (tmp_path / "broken.key").write_text("not a key")
    with pytest.raises(ConsoleError, match="certificate or key"):
        Console(fake, "127.0.0.1", 0, PASSWORD, issued.server_cert, tmp_path / "broken.key")
    with Console(fake, "127.0.0.1", 0, PASSWORD, issued.server_cert, issued.server_key) as console:
        assert console.url == f"https://127.0.0.1:{console.port}/"
        context = ssl.create_default_context(cafile=str(issued.ca_cert))  # verifies the certificate and the name
        user = Browserless(console, context)
        form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://localhost:{console.port}"}
        downgraded = user.request("POST", "/login", b"password=correct+horse+battery", form)
        assert downgraded.status == 403  # a page served over plain HTTP is another origin
        set_cookie, csrf = user.login()
        assert "Secure" in set_cookie and "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie
        status = user.request("GET", "/api/status")
        assert status.status == 200 and json.loads(status.read()) == fake.status()
        assert csrf
        # Plain HTTP on the TLS port gets no page.
        plain = Browserless(console)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/").read()


def test_a_reissued_certificate_is_served_to_new_connections(tmp_path: Path, fake: FakeDirector) -> None:
    """`salvo tls` again (here for another host) while the console runs: the
    next connections get the new certificate, no restart; one open before
    keeps its own."""
    first = tls.issue(tmp_path / "tls")
    verify = ssl.create_default_context(cafile=str(first.ca_cert))  # the CA stays: both verify
    server = Console(fake, "127.0.0.1", 0, PASSWORD, first.server_cert, first.server_key)
    server.cert_check_s = 0.05

    def served() -> list[str]:
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            verify.wrap_socket(raw, server_hostname="localhost") as conn,
        ):
            cert: dict[str, Any] = dict(conn.getpeercert() or {})
            return [name for kind, name in cert["subjectAltName"] if kind == "DNS"]

    with server:
        assert "projector.local" not in served()
        before = Browserless(server, verify).connect()
        before.request("GET", "/")
        assert before.getresponse().read()
        tls.issue(tmp_path / "tls", ["projector.local"])
        wait_until(lambda: "projector.local" in served(), 10, "the new certificate on a new connection")
        assert Browserless(server, verify).request("GET", "/").status == 200
        before.request("GET", "/")  # the connection made before still works
        assert before.getresponse().status == 200
        before.close()


def test_a_key_replaced_before_its_certificate_is_not_loaded_alone(tmp_path: Path) -> None:
    """`salvo tls` writes the key, then the certificate: a look between the
    two finds a pair that does not match and keeps serving the old one."""
    from salvo.web.webserver import CertificateWatch

    live, other = tls.issue(tmp_path / "live"), tls.issue(tmp_path / "other")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(live.server_cert, live.server_key)
    watch = CertificateWatch(context, live.server_cert, live.server_key, "the console")
    assert not watch.check()  # nothing changed
    for new, old in ((other.server_key, live.server_key), (other.server_cert, live.server_cert)):
        (tmp_path / "copy").write_bytes(new.read_bytes())
        os.replace(tmp_path / "copy", old)
        if old == live.server_key:
            assert not watch.check() and watch.loaded == 0  # a key without its certificate
    assert watch.check() and watch.loaded == 1


def test_status_is_read_off_the_event_loop(fake: FakeDirector) -> None:
    """A director slow to answer holds up one request, not the server."""
    release = threading.Event()
    slow = FakeDirector()
    original = slow.status

    def status() -> dict[str, Any]:
        release.wait(5)
        return original()

    slow.status = status  # type: ignore[method-assign]
    with Console(slow, "127.0.0.1", 0, PASSWORD) as console:
        user = Browserless(console)
        user.login()
        stuck = user.connect()
        stuck.request("GET", "/api/status", headers={"Cookie": user.cookie})
        try:
            assert 'name="password"' not in user.request("GET", "/").read().decode()  # answered meanwhile
        finally:
            release.set()
        assert stuck.getresponse().status == 200


# -- with the real director ----------------------------------------------------


def test_the_console_of_a_real_tournament_run(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """`salvo tournament run --console`: the director's own status, a control
    applied by its loop, one it refuses, its exports, and the console gone
    with it."""
    names = ["ada", "bletchley", "colossus", "dijkstra"]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    for n in names:
        add_team(registry, mosq.passwd, n)
    mosq.start()
    cmd = [
        *(sys.executable, "-m", "salvo", "tournament", "run", "--console", "127.0.0.1:0"),
        *("--broker", mosq.url("referee"), "--teams", str(registry), "--arenas", "2"),
        *("--state", str(tmp_path / "tournament.json"), "--referee-state", str(tmp_path / "referee.db")),
        *("--key-file", str(tmp_path / "referee.key"), "--log-level", "info"),
    ]
    env = {**os.environ, "SALVO_CONSOLE_PASSWORD": PASSWORD}
    director = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    stderr = director.stderr
    assert stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("organiser console: " in line for line in lines), 30, "the console's address")
        url = next(line for line in lines if "organiser console: " in line).split(": ", 1)[1].strip()
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        user = Browserless(_At(port))
        _, csrf = user.login()

        def status() -> dict[str, Any]:
            return dict(json.loads(user.request("GET", "/api/status").read()))

        wait_until(lambda: all(a["teams"] for a in status()["arenas"]), 30, "both arenas assigned")
        now = status()
        assert now["tournament"]["format"] == "round-robin" and now["tournament"]["games_total"] == 6
        assert sorted(r["team"] for r in now["standings"]) == names
        assert [a["arena"] for a in now["arenas"]] == ["arena1", "arena2"]

        def control(action: str, **args: Any) -> tuple[int, dict[str, Any]]:
            body = json.dumps({"action": action, "args": args}).encode()
            r = user.request("POST", "/api/control", body, {"Content-Type": "application/json", "X-CSRF-Token": csrf})
            return r.status, json.loads(r.read())

        code, entry = control("pause")
        assert code == 200 and entry["action"] == "pause" and entry["by"] == "console", entry
        assert status()["tournament"]["paused"] is True
        assert status()["audit"][-1]["action"] == "pause"
        code, refused = control("pause")  # the director's own refusal, with its code
        assert code == 400 and refused["code"] and refused["reason"], refused
        code, refused = control("void-game", game=99, reason="no such game")
        assert code == 400 and refused["code"], refused
        games = user.request("GET", "/export/games.csv")
        assert games.status == 200 and games.headers["Content-Type"] == "text/csv; charset=utf-8"
        assert games.read().decode().startswith("game,round,arena,")
        whole = json.loads(user.request("GET", "/export/tournament.json").read())
        assert whole["format"] == "round-robin" and whole["audit"][-1]["action"] == "pause"
        _the_room_is_on_the_same_server(port, lines)
    finally:
        director.send_signal(signal.SIGTERM)
        try:
            director.wait(30)
        finally:
            director.kill()
            reader.join(5)
    assert director.returncode == 0, "".join(lines[-40:])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _health(port: int) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/health")  # no login
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_health_says_whether_the_directors_loop_and_arenas_are_up(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """`GET /health` for a container's healthcheck: 200 while the loop comes
    round and both arenas are connected; 503, saying why, once the broker is
    gone; 200 again when it is back."""
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    for n in ("ada", "bletchley"):
        add_team(registry, mosq.passwd, n)
    mosq.start()
    cmd = [
        *(sys.executable, "-m", "salvo", "tournament", "run", "--console", "127.0.0.1:0"),
        *("--broker", mosq.url("referee"), "--teams", str(registry), "--arenas", "2"),
        *("--state", str(tmp_path / "tournament.json"), "--referee-state", str(tmp_path / "referee.db")),
        *("--key-file", str(tmp_path / "referee.key")),
    ]
    env = {**os.environ, "SALVO_CONSOLE_PASSWORD": PASSWORD}
    director = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    stderr = director.stderr
    assert stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("organiser console: " in line for line in lines), 30, "the console's address")
        url = next(line for line in lines if "organiser console: " in line).split(": ", 1)[1].strip()
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        code, body = _health(port)
        assert code == 200 and body["ok"] is True, body
        assert body["arenas"] == {"arena1": "up", "arena2": "up"} and body["loop_s"] < 10
        mosq.stop()
        wait_until(lambda: _health(port)[0] == 503, 15, "an unhealthy answer without the broker")
        code, body = _health(port)
        assert body["ok"] is False and "not connected to the broker: arena1, arena2" in body["reason"], body
        assert set(body) == {"ok", "loop_s", "arenas", "reason"}  # nothing more (no team, no secret)
        mosq.start()
        wait_until(lambda: _health(port)[0] == 200, 30, "healthy again with the broker back")
    finally:
        director.send_signal(signal.SIGTERM)
        try:
            director.wait(30)
        finally:
            director.kill()
            reader.join(5)
    assert director.returncode == 0, "".join(lines[-40:])


def _the_room_is_on_the_same_server(port: int, lines: list[str]) -> None:
    """The projector, its stream and the replay viewer answer on the
    console's port without a login, and the stream carries the night."""
    assert any(line.startswith(f"projector: http://127.0.0.1:{port}/projector") for line in lines)
    room = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for path, marker in (("/projector", b'src="spectate.js"'), ("/replay", b'src="replay.js"')):
        room.request("GET", path)
        page = room.getresponse()
        assert page.status == 200 and marker in page.read()
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    room.request("GET", "/events")
    stream = room.getresponse()
    assert stream.status == 200 and stream.headers["Content-Type"].startswith("text/event-stream")
    heard: list[str] = []

    def standings_heard() -> bool:
        heard.append(stream.readline().decode())
        return '"topic":"/tournament/standings"' in heard[-1]

    wait_until(standings_heard, 20, "the standings on the projector's stream")
    standings = json.loads(json.loads(heard[-1].removeprefix("data: "))["payload"])
    assert standings["format"] == "round-robin" and standings["paused"] is True
    room.close()


def test_a_body_past_the_limit_is_refused_unread(client: TestClient) -> None:
    from salvo.organiser.console.app import MAX_BODY

    huge = b"password=" + b"x" * (MAX_BODY + 1)
    r = client.post("/login", content=huge, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413 and r.json()["code"] == "too_large"
    csrf = login(client)
    r = client.post(
        "/api/control",
        content=b"{" + b" " * MAX_BODY + b"}",
        headers={"Content-Type": "application/json", "X-CSRF-Token": csrf},
    )
    assert r.status_code == 413 and r.json()["code"] == "too_large"
