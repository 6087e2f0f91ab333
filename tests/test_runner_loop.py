"""The loop thread drives every arena's paho connections (no paho threads):
it connects with back-off, serves a broker that comes up after it, takes
work handed over by other threads, and keeps a crash or a failing journal
where it belongs."""

from __future__ import annotations

import itertools
import logging
import random
import socket
import sqlite3
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from salvo.arena.arena import Log
from salvo.arena.journal import Store
from salvo.arena.resume import make_arenas
from salvo.arena.statefile import StoreFailure
from salvo.game.events import Config, Event
from salvo.net.link import CONNECT_TIMEOUT_S, RETRY_MAX_S, RETRY_MIN_S, Link, acknowledged
from salvo.net.loop import Loop, answer
from salvo.net.mqtt import Broker, connect_async, new_client
from salvo.referee import presence, runner
from salvo.referee.batch import Stop
from salvo.referee.flood import emit
from salvo.referee.service import Referee
from salvo.spec import crypto
from salvo.spec.topics import Topics

from kit import ArenaDriver
from mosquitto import Mosquitto
from mqttkit import Recorder, wait_until


class _Clock(Loop):
    """A loop whose time is whatever the test says: timers are collected and
    run by ``advance``, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(clock=lambda: self.now)

    def advance(self, until: float) -> None:
        while self._ready or self._handover or (self._timers and self._timers[0][0] <= until):
            if not self._ready and not self._handover:
                self.now = self._timers[0][0]
            self.run_once(0)
        self.now = until


def test_a_link_backs_off_doubling_up_to_the_cap_and_only_when_due(monkeypatch: pytest.MonkeyPatch) -> None:
    jitter: list[tuple[float, float]] = []

    def no_jitter(low: float, high: float) -> float:
        jitter.append((low, high))
        return high

    monkeypatch.setattr(random, "uniform", no_jitter)
    # Bound, never listening: every connection is refused, and no other socket
    # (a listener, or a connection's own source port) can take the port
    # meanwhile, as one did once after free_port() had let it go.
    refusing = socket.socket()
    refusing.bind(("127.0.0.1", 0))
    broker = Broker.from_url(f"mqtt://127.0.0.1:{refusing.getsockname()[1]}")
    client = new_client(broker, "backoff")
    connect_async(client, broker)
    loop = _Clock()
    tries: list[float] = []
    real = client.begin_attempt

    def counted() -> None:
        tries.append(loop.now)
        real()

    client.begin_attempt = counted  # type: ignore[method-assign]
    # The attempt's blocking part at once, not on a thread: this loop's time stands still.
    link = Link(loop, client, "connection", name="t", broker=broker, connector=lambda job: job())
    link.start()
    loop.advance(20.0)
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert tries[0] == 0.0
    assert gaps[:4] == pytest.approx([RETRY_MIN_S, 2 * RETRY_MIN_S, 4 * RETRY_MIN_S, 8 * RETRY_MIN_S])
    # capped: back within a second of the broker's return
    assert max(gaps) == pytest.approx(RETRY_MAX_S) and gaps[-1] == pytest.approx(RETRY_MAX_S)
    assert len(tries) == 4 + 1 + (20 - 1.5) // RETRY_MAX_S  # tried only when due, never in between
    assert set(jitter) == {(0.5, 1.0)}  # every wait is jittered: many links do not retry in step
    assert client.socket() is None
    loop.close()
    refusing.close()


@pytest.mark.broker
def test_a_referee_started_before_its_broker_connects_when_it_comes_up(tmp_path: Path) -> None:
    mosq = Mosquitto(tmp_path / "late-broker")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    arenas = make_arenas([prefix], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    ref = Referee(arenas, Broker.from_url(mosq.url("referee")), client_id=f"late-{prefix}")
    ref.start()
    try:
        assert not ref.wait_connected(1.5)  # refused, retrying: compose may start us first
        assert ref.fatal is None and not ref.any_stopped()
        mosq.start()
        assert ref.wait_connected(10), "did not connect once the broker came up"
        # connected: the next outage starts its back-off from the beginning again
        wait_until(lambda: all(link.delay == 0 for link in ref.runners[0]._links), 5, "back-off reset")
        rec = Recorder(mosq, "referee", [f"/{prefix}/#"])
        try:
            rec.wait_for(f"/{prefix}/game/server", "up", timeout=10)
            # Work handed over from another thread reaches the arena thread.
            assert answer(ref.soon.close_lobby(prefix, "testing the hand-over"), 10) is True
        finally:
            rec.close()
    finally:
        ref.stop()
        mosq.stop()


class _Unprintable:
    def __str__(self) -> str:
        raise AssertionError("formatted although the level is off")


def test_log_effects_are_formatted_only_when_logged_and_percent_signs_stay_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="salvo")
    emit("a1", Log(True, "lobby closed (50% of teams absent)"))
    emit("a1", Log(False, "reject fire /players/a%sb/fire: malformed"))
    emit("a1", Log(True, "accept %s %s: %s", ("fire", "/players/bob/fire", "alice fired at bob (1,2) 1/5")))
    assert [r.getMessage() for r in caplog.records] == [
        "[a1] lobby closed (50% of teams absent)",
        "[a1] reject fire /players/a%sb/fire: malformed",
        "[a1] accept fire /players/bob/fire: alice fired at bob (1,2) 1/5",
    ]
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING, logging.INFO]
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="salvo")
    emit("a1", Log(True, "accept %s", (_Unprintable(),)))  # below the level: never formatted
    assert caplog.records == []


def test_arenas_share_one_thread_and_one_that_crashes_stops_alone(broker: Mosquitto, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    doomed, fine = f"d{tag}", f"f{tag}"
    arenas = make_arenas([doomed, fine], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))

    def bug(*_a: object) -> list[object]:
        raise ZeroDivisionError("a bug in the arena")

    arenas[0].on_key = bug  # type: ignore[method-assign, assignment]
    ref = Referee(arenas, Broker.from_url(broker.url("referee")), client_id=f"one-{tag}")
    ref.start()
    rec = Recorder(broker, "referee", [f"/{fine}/#", f"/{doomed}/#"])
    try:
        assert ref.wait_connected(10)
        assert {r.loop for r in ref.runners} == {ref.loop}  # one loop, on one thread
        assert {t.name for t in threading.enumerate()} >= {"arenas"}
        rec.wait_for(f"/{doomed}/game/server", "up", timeout=10)
        rec.publish(Topics(doomed).request_participation, '{"name": "ann", "secret": "s"}')
        wait_until(lambda: not ref.runners[0].alive, 10, "the crashed arena to stop")
        assert ref.fatal is not None and ref.fatal.kind is Stop.INTERNAL
        assert "ZeroDivisionError" in ref.fatal.reason and ref.any_stopped()
        rec.wait_for(f"/{doomed}/game/server", "down", timeout=10)  # it said goodbye
        assert ref.runners[1].alive and ref.runners[1].fatal is None
        rec.publish(Topics(fine).request_participation, '{"name": "bob", "secret": "s"}')
        rec.wait_for(Topics(fine).players_list, '["bob"]', timeout=10)  # the other arena plays on
    finally:
        rec.close()
        ref.stop()


def test_a_message_that_meets_a_bug_is_dropped_and_the_arena_plays_on(
    broker: Mosquitto, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tag = uuid.uuid4().hex[:8]
    (arena,) = make_arenas([f"p{tag}"], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    real = arena.on_message

    def poisoned(topic: str, payload: bytes, now: float) -> list[Any]:
        if payload == b"poison":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "a bug reached by a message")
        return real(topic, payload, now)

    arena.on_message = poisoned  # type: ignore[method-assign]
    ref = Referee([arena], Broker.from_url(broker.url("referee")), client_id=f"poison-{tag}")
    ref.start()
    t = Topics(f"p{tag}")
    rec = Recorder(broker, "referee", [f"/p{tag}/#"])
    try:
        assert ref.wait_connected(10)
        with caplog.at_level(logging.ERROR, "salvo.referee"):
            rec.publish(t.request_participation, "poison")
            rec.publish(t.request_participation, '{"name": "ann", "secret": "s"}')
            rec.wait_for(t.players_list, '["ann"]', timeout=10)  # the next message is played
        assert ref.fatal is None and ref.runners[0].alive and ref.runners[0].dispatcher.poisoned == 1
        assert "broke the referee (a bug)" in caplog.text
    finally:
        rec.close()
        ref.stop()


class _DiskFull:
    """A journal whose SQLite commit fails: the events are spooled, never settled."""

    pending = 0

    def record_many(self, entries: list[tuple[str, int, Event]]) -> int:
        self.pending += len(entries)
        return self.pending

    def settle(self) -> None:
        raise StoreFailure("cannot write the state file x: the disk is full")

    def mark_published(self, arena: str, event_id: int) -> None:
        pass

    def check_intact(self) -> None:
        pass


def test_a_journal_that_cannot_commit_stops_the_referee_and_says_why(broker: Mosquitto, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    arenas = make_arenas([f"j{tag}"], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    ref = Referee(arenas, Broker.from_url(broker.url("referee")), client_id=f"disk-{tag}", journal=_DiskFull())
    ref.start()
    rec = Recorder(broker, "referee", [f"/j{tag}/#"])
    try:
        assert ref.wait_connected(10)
        rec.publish(Topics(f"j{tag}").request_participation, '{"name": "ann", "secret": "s"}')
        wait_until(ref.any_stopped, 10, "the referee to stop")
        assert ref.fatal is not None and ref.fatal.kind is Stop.STATE and "disk is full" in ref.fatal.reason
    finally:
        rec.close()
        ref.stop()


def test_a_result_published_while_cut_off_counts_once_the_broker_acknowledges_it(broker: Mosquitto) -> None:
    """paho keeps such a message's rc at NO_CONN for good and its
    is_published() raises; the journal's published mark must still move on."""
    client = new_client(Broker.from_url(broker.url("referee")), f"ack-{uuid.uuid4().hex[:8]}")
    info = client.publish("/ack/probe", "x", qos=1)  # not connected yet: queued
    assert info.rc == paho.MQTT_ERR_NO_CONN and not acknowledged(info)
    with pytest.raises(RuntimeError):
        info.is_published()  # what acknowledged works around
    connect_async(client, Broker.from_url(broker.url("referee")))
    client.loop_start()
    try:
        wait_until(lambda: acknowledged(info), 10, "the PUBACK of a message queued while cut off")
    finally:
        client.loop_stop()
        client.disconnect()


def test_an_arena_whose_sweep_hangs_holds_up_no_other(
    broker: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up sweep is a state of its arena, not a wait of the loop:
    one sweep whose marker never comes back delays that arena alone."""
    tag = uuid.uuid4().hex[:8]
    stuck, others = f"s{tag}", [f"o{tag}{i}" for i in range(20)]
    arenas = make_arenas([stuck, *others], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    monkeypatch.setattr(presence, "SWEEP_TIMEOUT_S", 3.0)
    real = presence.Sweep.start

    def marker_lost(sweep: presence.Sweep) -> None:
        real(sweep)
        if sweep.topics.prefix == stuck:
            sweep._token = b"never comes back"

    monkeypatch.setattr(presence.Sweep, "start", marker_lost)
    ref = Referee(arenas, Broker.from_url(broker.url("referee")), client_id=f"sweep-{tag}")
    ref.start()
    try:
        wait_until(lambda: all(r.connected.is_set() for r in ref.runners[1:]), 2.5, "the other arenas up")
        assert not ref.runners[0].connected.is_set()  # still sweeping
        assert ref.runners[0].alive
        with caplog.at_level(logging.WARNING, "salvo.referee"):
            assert ref.runners[0].connected.wait(10), "the stuck arena up after the sweep's timeout"
        assert "start-up sweep incomplete" in caplog.text
    finally:
        ref.stop()


def test_a_stop_says_down_for_every_arena_and_is_quick(broker: Mosquitto, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    prefixes = [f"q{tag}{i}" for i in range(30)]
    arenas = make_arenas(prefixes, Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    ref = Referee(arenas, Broker.from_url(broker.url("referee")), client_id=f"stop-{tag}")
    rec = Recorder(broker, "referee", ["/+/game/server"])
    ref.start()
    try:
        assert ref.wait_connected(10)
        for p in prefixes:
            rec.wait_for(f"/{p}/game/server", "up")
        mark = rec.mark()
        t0 = time.monotonic()
        ref.stop()
        assert time.monotonic() - t0 < 1.5
        assert ref.fatal is None and not any(r.alive for r in ref.runners)
        for p in prefixes:
            rec.wait_for(f"/{p}/game/server", "down", after=mark)
        # 'down' acknowledged, then a clean DISCONNECT (no will needed)
        wait_until(lambda: f"Client stop-{tag}-q{tag}0-out disconnected" in broker.log(), 5, "a clean DISCONNECT")
    finally:
        rec.close()


def test_a_down_the_broker_never_acknowledges_is_said_by_the_last_will(
    broker: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = uuid.uuid4().hex[:8]
    (arena,) = make_arenas([f"w{tag}"], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    ref = Referee([arena], Broker.from_url(broker.url("referee")), client_id=f"will-{tag}")
    rec = Recorder(broker, "referee", [f"/w{tag}/game/server"])
    ref.start()
    try:
        assert ref.wait_connected(10)
        rec.wait_for(f"/w{tag}/game/server", "up")
        monkeypatch.setattr(presence, "acknowledged", lambda _info: False)  # the PUBACK "lost"
        t0 = time.monotonic()
        ref.stop()
        assert runner.DOWN_WAIT_S <= time.monotonic() - t0 < 1.5
        rec.wait_for(f"/w{tag}/game/server", "down")
        wait_until(lambda: f"will-{tag}-w{tag}-out closed its connection" in broker.log(), 5, "the dropped connection")
    finally:
        rec.close()


def test_a_referee_over_tls_plays_a_salvo_of_messages(broker: Mosquitto, tmp_path: Path) -> None:
    """TLS keeps decrypted bytes the selector cannot see: a burst of
    messages must still be read to the end without waiting for more. (A
    referee on another machine: the referees' own TLS listener.)"""
    tag = uuid.uuid4().hex[:8]
    t = Topics(f"tls{tag}")
    arenas = make_arenas([t.prefix], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    target = Broker.from_url(broker.referee_tls_url()).with_ca_file(str(broker.ca_file))
    ref = Referee(arenas, target, client_id=f"tls-{tag}")
    ref.start()
    rec = Recorder(broker, "referee", [f"/{t.prefix}/#"])
    try:
        assert ref.wait_connected(10)
        names = [f"p{i}" for i in range(8)]
        for name in names:  # one burst, read through TLS
            rec.publish(t.request_participation, f'{{"name": "{name}", "secret": "s"}}')
        wait_until(lambda: set(names) <= set(ref.runners[0].arena.game.players), 15, "every join applied")
    finally:
        rec.close()
        ref.stop()


def test_a_published_backlog_is_marked_in_the_state_file_before_anything_else_happens(
    broker: Mosquitto, tmp_path: Path
) -> None:
    """A restart's backlog can end a game: its last hits, then the reset to
    a new lobby. Its published mark used to wait for the next journaled
    event (a join, minutes later): a referee killed meanwhile published the
    old game's hits again into the new lobby (salvo stress chaos, reset
    scenario). The broker's PUBACKs for the backlog now put the mark in the
    file at once."""
    tag = uuid.uuid4().hex[:8]
    prefix, key, path = f"b{tag}", crypto.load_or_create_referee_key(tmp_path / "k"), tmp_path / "state.db"
    store = Store(path)
    (arena,) = make_arenas([prefix], Config(), 1, key, store)
    d = ArenaDriver(prefix=prefix)
    d.game, d.arena = arena.game, arena
    for name in ("alice", "bob"):
        d.join(name)
    last = max(store.record_many([(prefix, 1, event)]) for event in d.records)  # journaled, never published
    store.close()  # (settled: the events are in SQLite)
    again = Store(path)
    arenas = make_arenas([prefix], Config(), 1, key, again)
    assert arenas[0].backlog and arenas[0].backlog_to == last
    ref = Referee(arenas, Broker.from_url(broker.url("referee")), client_id=f"mark-{tag}", journal=again)
    ref.start()

    def marked_first() -> bool:
        """The mark is in the file, and no later event (the referee journals
        a tick about a second after 'up') had to carry it there."""
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            (published,) = db.execute("SELECT published FROM arenas WHERE prefix = ?", (prefix,)).fetchone()
            (newest,) = db.execute("SELECT MAX(id) FROM events").fetchone()
        finally:
            db.close()
        assert newest == last, f"the backlog's mark reached the file only with a later event ({newest})"
        return bool(published >= last)

    try:
        assert ref.wait_connected(10)
        wait_until(marked_first, 5, "the backlog's published mark in the state file")
    finally:
        ref.stop()
        again.close()


# -- connecting never blocks the loop (issue 30) ------------------------------------------


class _LoopThread:
    """A loop running on a thread of its own, as the referee's does."""

    def __init__(self) -> None:
        self.loop = Loop()
        self.thread = threading.Thread(target=self.loop.run, name="test-loop", daemon=True)
        self.thread.start()

    def on(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the loop's thread; its result."""
        done: Future[Any] = Future()

        def call() -> None:
            try:
                done.set_result(fn(*args))
            except Exception as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(call)
        return done.result(10)

    def close(self) -> None:
        self.loop.stop()
        self.thread.join(10)
        self.loop.close()


def _dropping_address() -> tuple[socket.socket, list[socket.socket]]:
    """A listener whose accept queue is full: the kernel drops every further
    SYN, as a firewall that drops packets does (a connect times out)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    queued = []
    while True:
        try:
            queued.append(socket.create_connection(listener.getsockname(), timeout=0.3))
        except TimeoutError:
            return listener, queued


class _Gate:
    """A client's open_socket held until ``release()``: an attempt under way
    for as long as the test needs. Records the sockets it yields."""

    def __init__(self, client: Any) -> None:
        self.real = client.open_socket
        self.open = threading.Event()
        self.started = threading.Event()
        self.calls = 0
        self.yielded: list[Any] = []
        client.open_socket = self

    def __call__(self) -> Any:
        self.calls += 1
        self.started.set()
        assert self.open.wait(10)
        sock = self.real()
        self.yielded.append(sock)
        return sock

    def release(self) -> None:
        self.open.set()

    def closed(self) -> bool:
        """The socket the attempt yielded is closed."""
        return bool(self.yielded) and self.yielded[0].fileno() == -1


def test_a_node_that_drops_packets_holds_up_no_other_arena_on_the_loop(broker: Mosquitto, tmp_path: Path) -> None:
    """Arena A's broker address drops packets; arena B, on the same loop
    thread, is served at once all the while: each of B's round trips starts
    and ends while one of A's connection attempts is under way (a blocking
    connect would hold the loop, and B, for CONNECT_TIMEOUT_S each time)."""
    tag = uuid.uuid4().hex[:8]
    dropped, served = f"a{tag}", f"b{tag}"
    arena_a, arena_b = make_arenas([dropped, served], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    listener, queued = _dropping_address()
    host, port = listener.getsockname()
    ref = Referee([arena_b], Broker.from_url(broker.url("referee")), client_id=f"served-{tag}")
    a = runner.ArenaRunner(
        arena_a,
        Broker.from_url(f"mqtt://{host}:{port}"),
        client_id=f"dropped-{tag}",
        pool=ref.pool,
        loop=ref.loop,
        on_stopped=ref._arena_stopped,
    )
    ref.runners.append(a)
    windows: list[tuple[float, float, str]] = []  # A's failed attempts: start, end, why

    def timed(real: Any) -> Any:
        def open_socket() -> Any:
            start = time.monotonic()
            try:
                return real()
            except OSError as exc:
                windows.append((start, time.monotonic(), type(exc).__name__))
                raise

        return open_socket

    a.client.open_socket = timed(a.client.open_socket)  # type: ignore[method-assign]
    a.out.open_socket = timed(a.out.open_socket)  # type: ignore[method-assign]
    t = Topics(served)
    rec = Recorder(broker, "referee", [f"/{served}/#"])
    ref.start()
    try:
        assert ref.runners[0].connected.wait(10)
        for i in range(3):
            wait_until(lambda: a._sub.connecting and a._pub.connecting, 10, "A's attempts under way")
            underway = {a._sub._underway, a._pub._underway} - {None}
            start = time.monotonic()
            rec.publish(t.request_participation, f'{{"name": "team{i}", "secret": "s"}}')
            rec.wait(lambda m, i=i: m.topic == t.players_list and f"team{i}" in m.text, timeout=10)  # type: ignore[misc]
            # B's round trip began and ended while an attempt of A was under way
            assert underway & {a._sub._underway, a._pub._underway}, f"round trip {i}: no attempt of A lasted it"
            assert time.monotonic() - start < CONNECT_TIMEOUT_S
        # A keeps trying (each attempt gives up after CONNECT_TIMEOUT_S) and never connects.
        wait_until(lambda: sum(w[2] == "TimeoutError" for w in windows) >= 4, 20, "A's attempts to time out")
        assert not a.connected.is_set() and a.alive and a.fatal is None
        assert all(w[1] - w[0] >= CONNECT_TIMEOUT_S * 0.9 for w in windows if w[2] == "TimeoutError")
    finally:
        rec.close()
        ref.stop()  # A halts while an attempt is under way: nothing more of it
        listener.close()
        for sock in queued:
            sock.close()
    assert not ref._thread.is_alive() and not a.alive


def test_a_tls_handshake_that_never_ends_runs_off_the_loop() -> None:
    """A TLS listener that accepts TCP and never answers the handshake: the
    loop's timers run all the while, and the attempt takes the back-off."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # queued by the kernel, never accepted, never answered
    broker = Broker.from_url(f"mqtts://127.0.0.1:{silent.getsockname()[1]}")
    client = new_client(broker, "tls-silent", connect_timeout=1.0)
    connect_async(client, broker)
    lt = _LoopThread()
    ticks: list[float] = []
    failures: list[tuple[float, float]] = []
    real = client.open_socket

    def timed() -> Any:
        start = time.monotonic()
        try:
            return real()
        except OSError:
            failures.append((start, time.monotonic()))
            raise

    client.open_socket = timed  # type: ignore[method-assign]

    def tick() -> None:
        ticks.append(time.monotonic())
        lt.loop.call_later(0.05, tick)

    link = lt.on(lambda: Link(lt.loop, client, "connection", name="tls", broker=broker))
    lt.on(tick)
    lt.on(link.start)
    try:
        wait_until(lambda: len(failures) >= 2, 10, "two attempts to time out")
        start, end = failures[0]
        assert end - start >= 0.9  # the handshake waited its timeout ...
        assert sum(start < t < end for t in ticks) >= 5  # ... and the loop ran meanwhile
        assert lt.on(lambda: link.is_open) is False
    finally:
        lt.on(link.abort)
        lt.close()
        silent.close()


@pytest.mark.parametrize("how", ["close", "abort"])
def test_a_link_closed_while_connecting_closes_what_the_attempt_yields(broker: Mosquitto, how: str) -> None:
    url = Broker.from_url(broker.url("referee"))
    client = new_client(url, f"closing-{uuid.uuid4().hex[:8]}")
    connect_async(client, url)
    gate = _Gate(client)
    lt = _LoopThread()
    link = lt.on(lambda: Link(lt.loop, client, "connection", name="t", broker=url))
    try:
        lt.on(link.start)
        assert gate.started.wait(10)
        assert lt.on(lambda: link.connecting)
        lt.on(getattr(link, how))
        gate.release()
        wait_until(gate.closed, 10, "the late socket to be closed")
        # No reconnect afterwards: nothing scheduled, nothing under way, one attempt in all.
        assert lt.on(lambda: (link.connecting, link._retry, client.socket(), link.is_open)) == (
            False,
            None,
            None,
            False,
        )
        assert gate.calls == 1
    finally:
        gate.release()
        lt.close()


def test_a_referee_halted_while_connecting_closes_the_late_socket(broker: Mosquitto, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    (arena,) = make_arenas([f"h{tag}"], Config(), 1, crypto.load_or_create_referee_key(tmp_path / "k"))
    ref = Referee([arena], Broker.from_url(broker.url("referee")), client_id=f"halt-{tag}")
    gate = _Gate(ref.runners[0].client)
    ref.start()
    try:
        assert gate.started.wait(10)
    finally:
        ref.stop()  # halted with the subscribing connection's attempt under way
    assert not ref._thread.is_alive() and not ref.runners[0].alive
    gate.release()
    wait_until(gate.closed, 10, "the late socket to be closed")
    assert gate.calls == 1


def test_what_is_published_while_connecting_goes_out_after_connack(broker: Mosquitto) -> None:
    url = Broker.from_url(broker.url("referee"))
    topic = f"/q{uuid.uuid4().hex[:8]}/queued"
    rec = Recorder(broker, "referee", [topic])
    client = new_client(url, f"queued-{uuid.uuid4().hex[:8]}")
    connect_async(client, url)
    gate = _Gate(client)
    lt = _LoopThread()
    link = lt.on(lambda: Link(lt.loop, client, "connection", name="t", broker=url))
    try:
        lt.on(link.start)
        assert gate.started.wait(10)
        info = lt.on(lambda: client.publish(topic, b"meanwhile", qos=1))  # paho queues it
        gate.release()
        rec.wait_for(topic, "meanwhile", timeout=10)
        wait_until(lambda: lt.on(lambda: acknowledged(info)), 10, "the PUBACK")
    finally:
        gate.release()
        lt.on(link.close)
        lt.close()
        rec.close()


def test_a_link_fails_over_and_falls_back_to_mqtt_3_off_the_loop() -> None:
    """A dead node, then one that refuses MQTT 5 (as NATS does) and 3.1.1 (as
    an old broker does): the second attempt goes to the next node, the third
    to the same node in 3.1.1, the fourth in 3.1 (paho's own step down, which
    would reconnect at once from inside loop_read: the loop's attempt does it)."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: refused
    old = socket.socket()
    old.bind(("127.0.0.1", 0))
    old.listen(4)
    levels: list[int] = []

    def broker_311() -> None:
        while len(levels) < 3:
            conn, _ = old.accept()
            with conn:
                packet = conn.recv(1024)  # CONNECT: fixed header, protocol name, level
                name = b"MQIsdp" if b"MQIsdp" in packet else b"MQTT"  # (3.1's name, 3.1.1's and 5's)
                level = packet[packet.index(name) + len(name)]
                levels.append(level)
                conn.sendall(b"\x20\x02\x00\x00" if level == 3 else b"\x20\x02\x00\x01")
                conn.recv(1024)  # until the client closes (or subscribes: the test is over)

    server = threading.Thread(target=broker_311, daemon=True)
    server.start()
    ports = [dead.getsockname()[1], old.getsockname()[1]]
    url = Broker.from_url(f"mqtt://127.0.0.1:{ports[0]},mqtt://127.0.0.1:{ports[1]}")
    client = new_client(url, f"fallback-{uuid.uuid4().hex[:8]}")
    connect_async(client, url)
    tried: list[int] = []
    real = client.begin_attempt

    def noted() -> None:
        real()
        tried.append(client.endpoint[1])

    client.begin_attempt = noted  # type: ignore[method-assign]
    lt = _LoopThread()
    link = lt.on(lambda: Link(lt.loop, client, "connection", name="t", broker=url))
    try:
        lt.on(link.start)
        wait_until(lambda: lt.on(client.is_connected), 10, "connected in 3.1")
        assert tried == [ports[0], ports[1], ports[1], ports[1]]
        assert levels == [5, 4, 3] and not client.mqtt5
    finally:
        lt.on(link.abort)
        lt.close()
        server.join(10)
        dead.close()
        old.close()


@pytest.mark.skipif(not hasattr(socket, "TCP_CORK"), reason="TCP_CORK is Linux's")
def test_a_write_of_many_packets_is_corked_once_and_leaves_the_socket_uncorked(
    broker: Mosquitto, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's publishes go out in one corked write, in order, and the
    socket is uncorked after it: a lone publish (a shot's hit) would
    otherwise wait up to 200 ms for the kernel to push it."""
    from salvo.net import link as link_module

    corks: list[int] = []
    set_cork = link_module._set_cork

    def spy(sock: Any, on: int) -> None:
        corks.append(on)
        set_cork(sock, on)

    monkeypatch.setattr(link_module, "_set_cork", spy)
    url = Broker.from_url(broker.url("referee"))
    topic = f"/c{uuid.uuid4().hex[:8]}/corked"
    rec = Recorder(broker, "referee", [topic])
    client = new_client(url, f"corked-{uuid.uuid4().hex[:8]}")
    connect_async(client, url)
    lt = _LoopThread()
    link = lt.on(lambda: Link(lt.loop, client, "connection", name="t", broker=url))
    try:
        lt.on(link.start)
        wait_until(lambda: lt.on(client.is_connected), 10, "the connection")

        def batch() -> None:
            for i in range(10):
                client.publish(topic, str(i).encode(), qos=1)
            link.write_now()

        lt.on(batch)
        rec.wait_for(topic, "9", timeout=10)
        assert [m.text for m in rec.on(topic)] == [str(i) for i in range(10)]
        assert corks[:2] == [1, 0]
        sock = lt.on(client.socket)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) == 0
        corks.clear()
        lt.on(lambda: (client.publish(topic, b"alone", qos=1), link.write_now()))
        rec.wait_for(topic, "alone", timeout=10)
        assert corks == []  # one packet: no cork
    finally:
        lt.on(link.close)
        lt.close()
        rec.close()
