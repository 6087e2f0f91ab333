"""The director on its referee's loop keeps slow work off it: the journal
look-up at a result and the state file's saves run on its worker while the
loop goes on (every arena of the referee is served there), and what a save
records is told only once it is on disk. A message of one arena steps that
arena only."""

from __future__ import annotations

import json
import os
import pickle
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from salvo.arena.journal import Store
from salvo.net.loop import Loop
from salvo.net.mqtt import Broker
from salvo.net.watch import Recorder, wait_until
from salvo.organiser import journaltools
from salvo.organiser.tournament import director as director_module
from salvo.organiser.tournament import games, spool, steps
from salvo.organiser.tournament.director import Director
from salvo.organiser.tournament.scoring import GameResult
from salvo.organiser.tournament.state import Live, State
from salvo.spec.topics import Topics, TournamentTopics
from test_tournament_actions import StandIn

from kit import game_over
from mosquitto import Mosquitto


@pytest.fixture
def loop() -> Iterator[Loop]:
    """A running loop, as the referee's in salvo tournament run."""
    loop = Loop()
    thread = threading.Thread(target=loop.run, name="test-referee-loop", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def _night(broker: Mosquitto, tmp_path: Path, state: State, arenas: list[str], loop: Loop) -> Director:
    d = Director(
        broker=Broker.from_url(broker.url("referee")),
        arenas=arenas,
        state=state,
        state_path=tmp_path / "t.json",
        roster={a: set() for a in arenas},
        referee=StandIn(),
        loop=loop,
    )
    d.save()
    return d


def _loop_turns(loop: Loop) -> bool:
    """Does the loop still run its callbacks (a timer of it fires soon)?"""
    turned = threading.Event()
    loop.call_soon_threadsafe(lambda: loop.call_later(0.05, turned.set))
    return turned.wait(5)


class SlowDisk:
    """``os.fsync`` of the director's state file waits for :attr:`release`
    when the state written ``holds`` something (its other files are not slowed)."""

    def __init__(self, path: Path, holds: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            name = os.readlink(f"/proc/self/fd/{fd}")
            if name.endswith(f".{path.name}.tmp") and json.loads(Path(name).read_text())[holds]:
                self.entered.set()
                self.release.wait(10)
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def _stop(d: Director, night: threading.Thread) -> None:
    d.halt()
    night.join(10)
    d.close()


def _end(d: Director, night: threading.Thread, client: Recorder, retained: Iterable[str]) -> None:
    """Stop the night, clear what the test left retained, close its client."""
    _stop(d, night)
    for topic in retained:
        client.publish(topic, "", retain=True)
    client.close()


def test_a_results_journal_look_up_leaves_the_loop_free(
    broker: Mosquitto, tmp_path: Path, prefix: str, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a result the director finds the game in the journal (SQLite, a
    replay): on its worker, while the loop goes on; the result is recorded
    with the journal's details once it is back."""
    entered, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def find_game(_store: Store, _game_id: str, arena: str | None = None) -> tuple[str, int]:
        threads.append(threading.current_thread().name)
        entered.set()
        release.wait(10)  # a slow journal
        assert arena is not None
        return arena, 4

    def summarize(_store: Store, _arena: str, number: int) -> Any:
        return SimpleNamespace(game_no=number, started=100.0, ended=160.0)

    monkeypatch.setattr(journaltools, "find_game", find_game)
    monkeypatch.setattr(journaltools, "summarize", summarize)
    a, b = f"{prefix}-a", f"{prefix}-b"
    state = State("round-robin", 1, [a, b])
    state.draw()
    state.live[prefix] = Live(0, prefix, 0.0, game_id="g1")
    d = _night(broker, tmp_path, state, [prefix], loop)
    d.store = cast(Store, object())  # (read by the stand-ins above only)
    night = threading.Thread(target=d.run, daemon=True)
    arena = Recorder(Broker.from_url(broker.url("referee")), [], label="arena")
    t = Topics(prefix)
    try:
        night.start()
        over = game_over(t, a, b)
        for topic, payload in over.items():
            arena.publish(topic, payload, retain=True)
        assert entered.wait(15), "the director never looked the game up"
        assert _loop_turns(loop), "the loop waited for the journal look-up"
        assert threads == ["tournament-disk_0"]
        assert d.on_loop(lambda: len(d.state.results)) == 0  # (recorded once the look-up is back)
        release.set()
        wait_until(lambda: d.on_loop(lambda: len(d.state.results)) == 1, what="the result recorded")
        result = d.state.results[0]
        assert (result.journal_game, result.started, result.ended) == (4, 100.0, 160.0)
    finally:
        release.set()
        _end(d, night, arena, [*over, TournamentTopics.assignment(a), TournamentTopics.assignment(b)])


def test_an_assignment_is_told_once_its_save_is_on_disk_and_the_loop_goes_on_meanwhile(
    broker: Mosquitto, tmp_path: Path, prefix: str, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save that records an assignment is slow (a slow disk: its fsync
    waits): the loop goes on meanwhile, and nobody is told the assignment
    until the state file holds it."""
    path = tmp_path / "t.json"
    disk = SlowDisk(path, "live", monkeypatch)
    a, b = f"{prefix}-a", f"{prefix}-b"
    d = _night(broker, tmp_path, State("round-robin", 1, [a, b]), [prefix], loop)
    night = threading.Thread(target=d.run, daemon=True)
    heard = [TournamentTopics.assignments()]
    teams = Recorder(Broker.from_url(broker.url("referee")), heard, label="teams")
    t = Topics(prefix)
    try:
        teams.publish(t.players_list, "[]", retain=True)
        teams.publish(t.state, "lobby", retain=True)  # an empty lobby: the fixture goes there
        night.start()
        assert disk.entered.wait(15), "the assignment was never saved"
        assert _loop_turns(loop), "the loop waited for the save"
        assert json.loads(path.read_text())["live"] == {}
        assert teams.latest(TournamentTopics.assignment(a)) is None, "told before the state holds it"
        disk.release.set()
        told = teams.wait(lambda m: m.topic == TournamentTopics.assignment(a) and bool(m.payload), timeout=15)
        assert json.loads(told.payload)["arena"] == prefix
        assert list(json.loads(path.read_text())["live"]) == [prefix]  # (on disk before it was told)
    finally:
        disk.release.set()
        _end(d, night, teams, (t.players_list, t.state, TournamentTopics.assignment(a), TournamentTopics.assignment(b)))


def test_a_message_of_one_arena_steps_that_arena_only(
    broker: Mosquitto, tmp_path: Path, prefix: str, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every message used to step every arena; now its own, and a tick (or
    a control, or the tournament's own topics) every one."""
    monkeypatch.setattr(director_module, "TICK_S", 3600.0)  # (the first step only: then messages)
    stepped: list[list[str]] = []
    real_step, real_start = games.step, steps.Runner.start

    def step(d: Director, arena: str) -> steps.Step[None]:
        stepped[-1].append(arena)
        return real_step(d, arena)

    def start(runner: steps.Runner, *args: Any) -> None:
        stepped.append([])
        real_start(runner, *args)

    monkeypatch.setattr(games, "step", step)
    monkeypatch.setattr(steps.Runner, "start", start)
    x, y = f"{prefix}x", f"{prefix}y"
    state = State("round-robin", 1, [f"{prefix}-a", f"{prefix}-b"])
    state.paused = True  # (nothing assigned: only the steps are looked at)
    d = _night(broker, tmp_path, state, [x, y], loop)
    night = threading.Thread(target=d.run, daemon=True)
    arena = Recorder(Broker.from_url(broker.url("referee")), [], label="arena")
    try:
        night.start()
        wait_until(lambda: d.on_loop(lambda: [x, y] in stepped), what="the first step, of every arena")
        for one in ([x], [y]):
            arena.publish(Topics(one[0]).state, "lobby", retain=True)
            wait_until(lambda: d.on_loop(lambda: one in stepped), what=f"a step of {one[0]} alone")  # noqa: B023
    finally:
        _end(d, night, arena, [Topics(x).state, Topics(y).state])


def test_a_message_of_one_arena_still_assigns_another(
    broker: Mosquitto, tmp_path: Path, prefix: str, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What one arena's message changes may seat a fixture in another: its
    teams held until its reset are free once it is back in its lobby, and
    the other arena's empty lobby gets their game at that message, not at
    the next tick (the assignment looks at every arena, whatever came)."""
    monkeypatch.setattr(director_module, "TICK_S", 3600.0)
    x, y = f"{prefix}x", f"{prefix}y"
    a, b = f"{prefix}-a", f"{prefix}-b"
    d = _night(broker, tmp_path, State("round-robin", 1, [a, b]), [x, y], loop)
    d.finishing[x] = {a, b}  # (their last game's arena, not reset yet)
    night = threading.Thread(target=d.run, daemon=True)
    teams = Recorder(Broker.from_url(broker.url("referee")), [TournamentTopics.assignments()], label="teams")
    tx, ty = Topics(x), Topics(y)
    retained = {tx.state: "over", tx.players_list: json.dumps([a, b]), ty.state: "lobby", ty.players_list: "[]"}
    try:
        for topic, payload in retained.items():
            teams.publish(topic, payload, retain=True)
        night.start()
        wait_until(lambda: d.on_loop(lambda: d.state.drawn == 1), what="the first step")
        assert d.on_loop(lambda: dict(d.state.live)) == {}  # (a and b are busy in x)
        teams.publish(tx.state, "lobby", retain=True)  # x's reset: a message of x
        told = teams.wait(lambda m: m.topic == TournamentTopics.assignment(a) and bool(m.payload), timeout=15)
        assert json.loads(told.payload)["arena"] == y
    finally:
        _end(d, night, teams, [*retained, TournamentTopics.assignment(a), TournamentTopics.assignment(b)])


def test_a_controls_answer_and_its_reply_wait_for_its_save(
    broker: Mosquitto, tmp_path: Path, prefix: str, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's answer to a control, and the CLI's reply in
    <state>.replies, come once the state holding the control is on disk (a
    reply before it, and a crash, would leave a control answered and not
    applied: the restart skips answered requests)."""
    path = tmp_path / "t.json"
    disk = SlowDisk(path, "audit", monkeypatch)
    d = _night(broker, tmp_path, State("round-robin", 1, [f"{prefix}-a", f"{prefix}-b"]), [prefix], loop)
    night = threading.Thread(target=d.run, daemon=True)
    answers: list[dict[str, Any]] = []
    asking = threading.Thread(target=lambda: answers.append(d.request("pause", {}, "console")))
    try:
        night.start()
        asking.start()
        assert disk.entered.wait(15), "the control was never saved"
        assert _loop_turns(loop), "the loop waited for the save"
        rid = spool.send(path, "resume", {}, "cli")  # applied meanwhile, saved after the pause
        wait_until(lambda: d.on_loop(lambda: [e["action"] for e in d.state.audit]) == ["pause", "resume"])
        assert not answers and json.loads(path.read_text())["audit"] == []
        assert not spool.paths(path)[1].exists(), "replied before the state holds the control"
        disk.release.set()
        asking.join(15)
        assert answers and answers[0]["action"] == "pause"
        replied = spool.reply(path, rid, timeout=15)
        assert replied is not None and replied["ok"] is True
        assert [e["action"] for e in json.loads(path.read_text())["audit"]] == ["pause", "resume"]
    finally:
        disk.release.set()
        _stop(d, night)


def _median_ms(work: Callable[[], object], times: int = 200) -> float:
    took = []
    for _ in range(times):
        start = time.perf_counter()
        work()
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1000


@pytest.mark.long
def test_what_a_save_and_a_look_up_cost_and_what_the_loop_keeps_of_them(tmp_path: Path) -> None:
    """The figures of CONTRIBUTING.md's Threads (``pytest -m long -s`` prints
    them): a whole save (16 teams' round robin, 60 results) against the
    pickled snapshot the loop keeps of it, and a result's journal look-up."""
    from test_journal_tools import night

    teams = [f"team{i:02d}" for i in range(16)]
    state = State("round-robin", 15, teams)
    state.draw()
    stats = {"shots": 40, "hits": 17, "sunk": 5, "accuracy": 0.42}
    for i, f in enumerate(state.fixtures[:60]):
        state.results.append(
            GameResult(f.round, "a1", list(f.teams), f.teams[0], {t: dict(stats) for t in f.teams}, fixture=i)
        )
    path = tmp_path / "t.json"
    save = _median_ms(lambda: state.save(path))
    snapshot = _median_ms(lambda: pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    store, _driver, seen = night(tmp_path / "journal")

    def look_up() -> None:
        where = journaltools.find_game(store, seen["ids"][1], "p")
        assert where is not None
        journaltools.summarize(store, *where)

    found = _median_ms(look_up, 50)
    print(
        f"\nstate file {path.stat().st_size} B: a save {save:.2f} ms, its snapshot on the loop {snapshot:.2f} ms;"
        f" a journal look-up (arena of 4 games) {found:.2f} ms (medians)"
    )
    assert snapshot * 5 < save
