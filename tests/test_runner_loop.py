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
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import MQTTErrorCode

from salvo.arena.arena import Log
from salvo.arena.journal import Store, StoreFailure
from salvo.arena.resume import make_arenas
from salvo.game.events import Config, Event
from salvo.net.link import RETRY_MAX_S, RETRY_MIN_S, Link, acknowledged
from salvo.net.loop import Loop
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
        while self._ready or (self._timers and self._timers[0][0] <= until):
            if not self._ready:
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
    real = client.reconnect

    def counted() -> MQTTErrorCode:
        tries.append(loop.now)
        return real()

    client.reconnect = counted  # type: ignore[method-assign]
    link = Link(loop, client, "connection", name="t", broker=broker)
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
            assert ref.close_lobby(prefix, "testing the hand-over") is True
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
