"""Measurements, not assertions: the floods of the third review of the web
server, against a real director (`salvo tournament run --console`, its own
process) on a mosquitto with the shipped configuration. Each test prints its
figures; docs/security.md section 14 quotes them, before and after the fixes
(the same tests run on the commit before them):

    .venv/bin/pytest -q -m long tests/test_webserver_floods.py -s

The only thing they check is that the set-up did what it says (streams
open, junk sent, the director alive), never a time or a rate.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from salvo.net.watch import NoReply
from salvo.organiser.teams import add_team

from conftest import BrokerFactory
from mosquitto import Mosquitto
from mqttkit import Recorder, wait_until
from webkit import connect, venue

pytestmark = pytest.mark.long

PASSWORD = "correct horse battery"
TEAMS = ["ada", "bletchley", "colossus", "mallory"]
# The whole of 127.0.0.0/8 is this machine: in this director, only 127.0.0.1
# is the laptop, and 127.0.0.2, .3, ... stand in for the venue's machines.
NARROWED = (
    "import sys, salvo.web.webserver as w; w.loopback = lambda a: a == '127.0.0.1'; "
    "from salvo.cli import main; sys.argv[0] = 'salvo'; main()"
)


@dataclass
class Director:
    mosq: Mosquitto
    proc: subprocess.Popen[str]
    port: int
    lines: list[str] = field(default_factory=list)

    def get(self, path: str = "/", source: str = "127.0.0.1", body: bytes | None = None) -> tuple[int, float]:
        """(status, seconds) of one request from ``source``."""
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30, source_address=(source, 0))
        try:
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {}
            conn.request("POST" if body is not None else "GET", path, body, headers)
            status = conn.getresponse().status
        except OSError:
            status = 0  # closed without an answer
        finally:
            conn.close()
        return status, time.monotonic() - started


@contextlib.contextmanager
def director(new_broker: BrokerFactory, tmp_path: Path, *, narrowed: bool = False) -> Iterator[Director]:
    """A director with its console on a free port and two arenas; the four
    teams (mallory among them) are registered and never play."""
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    for name in TEAMS:
        mosq.users[name] = add_team(registry, mosq.passwd, name).mqtt_password
    mosq.start()
    args = [
        *("tournament", "run", "--console", "127.0.0.1:0", "--arenas", "2"),
        *("--broker", mosq.url("referee"), "--teams", str(registry)),
        *("--state", str(tmp_path / "tournament.json"), "--referee-state", str(tmp_path / "referee.db")),
        *("--key-file", str(tmp_path / "referee.key")),
    ]
    start = ["-c", NARROWED] if narrowed else ["-m", "salvo"]
    env = {**os.environ, "SALVO_CONSOLE_PASSWORD": PASSWORD}
    proc = subprocess.Popen([sys.executable, *start, *args], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    stderr = proc.stderr
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("organiser console: " in line for line in lines), 30, "the console's address")
        url = next(line for line in lines if "organiser console: " in line).split(": ", 1)[1].strip()
        yield Director(mosq, proc, int(url.rstrip("/").rsplit(":", 1)[1]), lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            proc.kill()
            reader.join(5)


class Streams:
    """``n`` open ``GET /events`` streams, their bytes counted on one thread."""

    def __init__(self, port: int, n: int) -> None:
        self.socks = [connect(port) for _ in range(n)]
        for sock in self.socks:
            sock.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.setblocking(False)
        self.bytes = 0
        self.open = n
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        sel = selectors.DefaultSelector()
        for i, sock in enumerate(self.socks):
            sel.register(sock, selectors.EVENT_READ, i)
        while not self._stop.is_set():
            for key, _ in sel.select(0.1):
                sock = self.socks[key.data]
                with contextlib.suppress(BlockingIOError):
                    data = sock.recv(65536)
                    self.bytes += len(data)
                    if not data:
                        sel.unregister(sock)
                        self.open -= 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self.socks:
            sock.close()


def _sample(get: Callable[[], tuple[int, float]], stop: threading.Event, into: list[tuple[int, float]]) -> None:
    while not stop.is_set():
        into.append(get())


def test_measure_a_junk_flood_against_200_streams(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """Finding 1: a team sends junk to fire topics of both arenas; the
    referee reports each on /game/errors (its budget: 200 a second an
    arena). 200 projector streams are open; what do they receive, and how
    long does the console's GET / take meanwhile?"""
    seconds, streams_n, junk_per_s = 5.0, 200, 1000
    with director(new_broker, tmp_path) as night:
        watcher = Recorder(night.mosq, "referee", ["/+/game/errors"], keep="latest")
        mallory = Recorder(night.mosq, "mallory", [])
        streams = Streams(night.port, streams_n)
        try:
            wait_until(lambda: streams.bytes > 0, 20, "the streams' first bytes")
            calm = [night.get() for _ in range(20)]
            before_bytes, before_reports = streams.bytes, watcher.received
            stop, during = threading.Event(), list[tuple[int, float]]()
            sampler = threading.Thread(target=_sample, args=(night.get, stop, during))
            sampler.start()
            started = time.monotonic()
            sent = 0
            while (elapsed := time.monotonic() - started) < seconds:
                while sent < elapsed * junk_per_s:
                    mallory.client.publish(f"/arena{1 + sent % 2}/players/ada/fire", f"junk {sent}", qos=0)
                    sent += 1
                time.sleep(0.01)
            took = time.monotonic() - started
            stop.set()
            sampler.join(30)
            received = streams.bytes - before_bytes
            reports = watcher.received - before_reports
            assert night.proc.poll() is None and streams.open == streams_n and sent > 0
        finally:
            streams.close()
            watcher.close()
            mallory.close()
    ms = [1000 * s for _, s in during]
    print(
        f"\njunk flood: {sent} junk messages in {took:.1f} s ({sent / took:.0f}/s, both arenas); "
        f"the referee published {reports / took:.0f} error reports/s; {streams_n} streams received "
        f"{received / took / 1e6:.2f} MB/s in all ({received / took / streams_n / 1e3:.1f} kB/s each); "
        f"the console answered GET / {len(ms)} times one after the other (mean {statistics.mean(ms):.1f} ms, "
        f"median {statistics.median(ms):.1f} ms, max {max(ms):.0f} ms; before the flood: median "
        f"{statistics.median(1000 * s for _, s in calm):.1f} ms); "
        f"statuses {dict(Counter(status for status, _ in during))}"
    )


def test_measure_held_login_bodies_from_32_venue_addresses(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """Finding 2: 1,999 logins whose bodies never come, from 32 venue
    addresses (64 each, the per-address limit); then the organiser, on the
    laptop itself, asks for the console and logs in."""
    held_n = 1999
    with director(new_broker, tmp_path, narrowed=True) as night:
        head = (
            b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 100\r\n\r\npassword=x"
        )
        socks: list[socket.socket] = []
        poll = select.poll()

        def shut() -> int:
            """How many of the held the server has shut or answered (an answer is never a login)."""
            return len(poll.poll(0))

        try:
            started = time.monotonic()
            for i in range(held_n):  # about 2,000 a second: the server keeps up, as with a patient attacker
                with contextlib.suppress(OSError):
                    socks.append(connect(night.port, source=venue(i % 32)))
                    poll.register(socks[-1], select.POLLIN)
                    socks[-1].sendall(head)
                time.sleep(0.0005)
            opened = time.monotonic() - started
            last = -1
            while last != (now := shut()):  # settled: nothing shut in the last half second
                last = now
                time.sleep(0.5)
            laptop = [night.get("/") for _ in range(5)]
            body = f"password={PASSWORD.replace(' ', '+')}".encode()
            logins = [night.get("/login", body=body) for _ in range(5)]
            closed = shut()
            # How long the venue holds them: until every one is cut, or 15 s from the last one sent.
            with contextlib.suppress(NoReply):
                wait_until(lambda: shut() == len(socks), started + opened + 15 - time.monotonic(), "all cut")
            cut = f"all cut {time.monotonic() - started - opened:.1f} s after the last was sent"
            if shut() < len(socks):
                cut = f"{len(socks) - shut()} still held 15 s after the last was sent"
            assert night.proc.poll() is None
        finally:
            for sock in socks:
                sock.close()
    print(
        f"\nheld bodies: {held_n} logins with a body that never comes from 32 addresses, opened in {opened:.1f} s; "
        f"{len(socks) - closed} held when the organiser asked, {closed} shut or answered; "
        f"the laptop's GET /: {[s for s, _ in laptop]} "
        f"(median {statistics.median(t for _, t in laptop) * 1000:.0f} ms), "
        f"its login: {[s for s, _ in logins]}; {cut}"
    )


def test_measure_malformed_requests_in_the_log(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """Finding 4: 2,000 malformed requests without a login; how many lines
    does the organiser's terminal get (the director's stderr at its
    default level)?"""
    flood = 2000

    def malformed(port: int) -> int:
        try:
            with connect(port) as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                return len(sock.recv(64))
        except OSError:
            return 0

    with director(new_broker, tmp_path) as night:
        wait_until(lambda: night.get("/")[0] == 200, 10, "the console")
        mark = len(night.lines)
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            answered = sum(1 for n in pool.map(malformed, [night.port] * flood) if n)
        took = time.monotonic() - started
        during = len(night.lines) - mark
        # The summary comes when the window ends (10 s at most): wait for it, or give up after 12 s.
        with contextlib.suppress(NoReply):
            wait_until(lambda: any("more like this" in line for line in night.lines[mark:]), 12, "the summary")
        lines = night.lines[mark:]
        assert night.proc.poll() is None and answered == flood
    about = [line for line in lines if "Invalid HTTP request" in line]
    print(
        f"\nmalformed requests: {flood} in {took:.1f} s, all answered 400; the director wrote {during} log lines "
        f"meanwhile, {len(about)} about them in all (the window's summary included):\n  " + "  ".join(about[:3])
    )
