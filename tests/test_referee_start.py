"""A referee with many arenas begins them on its loop's thread, a while after
`start()`; `salvo referee` asks `any_stopped()` every 0.2 s from the first
moment. An arena not begun yet is not stopped: counted as stopped, it made a
referee of 1000 arenas exit at once, silently, with exit code 0, in 2 of 4
starts (`salvo bench scale`, 2026-11-28)."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.net.mqtt import Broker
from salvo.referee import bootstrap
from salvo.referee.service import Referee
from salvo.sdk.client import SalvoClient
from salvo.spec import crypto

from mosquitto import Mosquitto
from mqttkit import wait_until


@pytest.fixture
def unreachable() -> Iterator[Broker]:
    """A port bound but never listening: every connection is refused (the
    arenas keep retrying; nothing here needs a broker)."""
    refusing = socket.socket()
    refusing.bind(("127.0.0.1", 0))
    yield Broker.from_url(f"mqtt://127.0.0.1:{refusing.getsockname()[1]}")
    refusing.close()


def _referee(broker: Broker, tmp_path: Path, arenas: int) -> Referee:
    key = crypto.load_or_create_referee_key(tmp_path / "referee.key")
    games = make_arenas([f"start{i}" for i in range(arenas)], Config(), 1, key)
    return Referee(games, broker, client_id="start-test")


def test_arenas_the_loop_has_not_begun_yet_have_not_stopped(unreachable: Broker, tmp_path: Path) -> None:
    ref = _referee(unreachable, tmp_path, 3)
    assert not ref.any_stopped()  # not started at all
    gate = threading.Event()
    # The loop's thread busy before it comes to begin the arenas (as with a
    # thousand of them): what run_until sees meanwhile.
    ref.loop.call_soon_threadsafe(gate.wait, 10)
    ref.start()
    try:
        assert not any(r.alive for r in ref.runners)  # not begun...
        assert not ref.any_stopped()  # ...and so not stopped either
        stop = threading.Event()
        ran = threading.Thread(target=bootstrap.run_until, args=(ref, stop, 0.01), daemon=True)
        ran.start()
        gate.set()
        wait_until(lambda: all(r.alive for r in ref.runners), 10, "every arena begun")
        assert ran.is_alive() and ref.fatal is None  # run_until goes on: nothing stopped
        stop.set()
        ran.join(10)
        assert not ran.is_alive()
    finally:
        gate.set()
        ref.stop()
    assert ref.any_stopped() and all(r.stopped for r in ref.runners)


def test_a_loop_started_without_its_arenas_has_no_arena_stopped(unreachable: Broker, tmp_path: Path) -> None:
    """The tournament's director starts the loop first and the arenas later;
    it stops the night when the referee says an arena stopped."""
    ref = _referee(unreachable, tmp_path, 2)
    ref.start(arenas=False)
    try:
        assert not ref.any_stopped()
    finally:
        ref.stop()


def test_an_arena_without_a_deadline_probes_the_broker_once_and_one_with_a_deadline_goes_on(
    broker: Mosquitto, tmp_path: Path
) -> None:
    """The lag clock's probe (a message through the broker and back) is
    asked for only by a running deadline. An empty lobby has none: one
    probe at connect (the clock trusted before any game can start), then
    none; 1000 idle arenas made 2000 probes a second, 23 % of a core
    (`salvo bench scale`, 2026-11-28). A team in the lobby starts the
    placement deadline, and the probes with it."""
    prefix = f"probes{uuid.uuid4().hex[:8]}"
    key = crypto.load_or_create_referee_key(tmp_path / "referee.key")
    ref = Referee(make_arenas([prefix], Config(), 1, key), Broker.from_url(broker.url("referee")), client_id=prefix)
    runner = ref.runners[0]
    probes, windows = [], []
    probe, window = runner._lag.probe, runner._lag.window

    def probed(now: float) -> bytes | None:
        token = probe(now)
        probes.append(token is not None)
        return token

    def windowed(now: float) -> None:
        windows.append(now)
        window(now)

    runner._lag.probe = probed  # type: ignore[method-assign]
    runner._lag.window = windowed  # type: ignore[method-assign]
    ref.start()
    team = SalvoClient("alice", "alice-secret-for-tests", broker.url("alice"), prefix=prefix)
    try:
        assert ref.wait_connected(10)
        wait_until(lambda: len(windows) >= 4, 10, "four housekeeping windows")
        assert probes == [True]  # the first, at connect; none while no deadline runs
        team.connect().join()
        assert runner.arena.next_deadline() is not None  # the placement period
        wait_until(lambda: sum(probes) >= 3, 10, "probes while the deadline runs")
    finally:
        team.close()
        ref.stop()
