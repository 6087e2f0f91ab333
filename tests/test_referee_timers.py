"""Deadlines driven by the referee's real timers, on a real mosquitto."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import RefereeFactory, TeamFactory
from kit import COLUMNS, ROWS
from mosquitto import Mosquitto
from mqttkit import Recorder, connect_team


def test_deadline_starts_with_complete_fleets_and_leaves_out_the_rest(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(placement_timeout=1.0, turn_timeout=20)
    P = f"/{prefix}"
    teams = {n: make_team(n) for n in ("alice", "bob", "carol")}
    for t in teams.values():
        t.join()
    watcher.wait_for(f"{P}/players/count", "3")
    teams["bob"].place_fleet(COLUMNS)
    teams["alice"].place_fleet(ROWS)
    teams["carol"].place("carrier", ROWS["carrier"])
    left_out = teams["carol"].conn.wait_for(f"{P}/players/carol/error", timeout=5).json()
    assert "left out" in left_out["error"]
    watcher.wait_for(f"{P}/game/state", "turn")
    assert watcher.text(f"{P}/players/list") == '["bob","alice"]'
    assert watcher.text(f"{P}/players/count") == "2"


def test_too_few_fleets_at_the_deadline_keep_the_lobby_open(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(placement_timeout=0.5)
    P = f"/{prefix}"
    alice, bob = make_team("alice"), make_team("bob")
    alice.join()
    bob.join()
    watcher.wait_for(f"{P}/players/count", "2")
    alice.place_fleet(ROWS)
    first = watcher.wait(lambda m: m.topic == f"{P}/game/deadline").json()["at"]
    rearmed = watcher.wait(lambda m: m.topic == f"{P}/game/deadline" and m.json()["at"] > first + 0.4, timeout=5)
    assert rearmed.json()["phase"] == "placement"
    assert watcher.text(f"{P}/game/state") == "lobby"
    # bob placed nothing: removed from the lobby (v2), told so on his own topic
    left_out = bob.conn.wait(lambda m: m.topic == f"{P}/players/bob/error").json()
    assert left_out["code"] == "left_out"
    watcher.wait_for(f"{P}/players/list", '["alice"]')
    bob.join()  # back in, with a fleet this time: every fleet is complete, the game starts at once
    watcher.wait_for(f"{P}/players/list", '["alice","bob"]')
    bob.place_fleet(COLUMNS)
    watcher.wait_for(f"{P}/game/state", "turn")


def test_turn_timeouts_drop_an_idle_player(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(turn_timeout=0.3, max_missed_turns=2, reset_after=60)
    P = f"/{prefix}"
    teams = {"alice": make_team("alice"), "bob": make_team("bob")}
    for t in teams.values():
        t.join()
    watcher.wait_for(f"{P}/players/count", "2")
    teams["alice"].place_fleet(ROWS)
    teams["bob"].place_fleet(COLUMNS)
    # Nobody fires: the first player to miss twice in a row is dropped.
    first = watcher.wait_for(f"{P}/game/current").text
    other = "bob" if first == "alice" else "alice"
    watcher.wait_for(f"{P}/game/state", "over", timeout=10)
    assert watcher.text(f"{P}/game/winner") == other
    salvos = [m.json() for m in watcher.on(f"{P}/game/salvo")]
    assert [s["player"] for s in salvos] == [first, other, first]
    assert all(s["shots"] == 0 for s in salvos)
    assert watcher.text(f"{P}/players/{first}/defeated") == "true"
    stats = watcher.wait_for(f"{P}/game/stats/players/{first}").json()
    assert stats["reason"] == "timeout" and stats["defeated_in_turn"] == 3
    assert watcher.wait_for(f"{P}/game/stats/summary").json()["termination"] == "forfeit"


def test_key_derivation_does_not_block_other_messages(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(max_players=20)
    P = f"/{prefix}"
    alice = make_team("alice")
    alice.join()
    watcher.wait_for(f"{P}/players/count", "1")
    mark = watcher.mark()
    for i in range(12):  # ~12 x 70 ms of argon2id on a couple of cores
        watcher.publish(f"{P}/game/request_participation", f'{{"name": "p{i}", "secret": "s{i}"}}')
    alice.place("carrier", ROWS["carrier"])
    approved = watcher.wait_for(f"{P}/players/alice/ships/carrier/approved", "true", after=mark)
    full = watcher.wait_for(f"{P}/players/count", "13", after=mark, timeout=20)
    assert watcher.messages.index(approved) < watcher.messages.index(full), "the placement waited for the joins"


_STEPPED_CLOCK = """
import os, time
_real, _trigger = time.time, os.environ["SALVO_TEST_STEP_FILE"]
def _stepped():
    # once the test creates the file, this process's wall clock is 30 s back
    now = _real()
    return now - 30.0 if os.path.exists(_trigger) else now
time.time = _stepped
"""


def test_a_backward_clock_step_does_not_stretch_the_turn(broker: Mosquitto, prefix: str, tmp_path: Path) -> None:
    """The machine's clock stepped back 30 s in the middle of a turn (a VM
    restored, an organiser setting the time): the running turn lasted its
    timeout plus the step (a 6 s turn: 36 s in the review). The referee's
    deadlines run on a clock that never steps now, so the turn ends on time."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_STEPPED_CLOCK)  # read by Python at its start
    trigger = tmp_path / "step-now"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "SALVO_TEST_STEP_FILE": str(trigger)}
    files = ["--state", str(tmp_path / "r.db"), "--key-file", str(tmp_path / "r.key")]
    timing = ["--turn-timeout", "2", "--max-missed-turns", "1", "--placement-timeout", "20"]
    url = broker.url("referee")
    referee = subprocess.Popen(
        [sys.executable, "-m", "salvo", "referee", "--broker", url, "--prefix", prefix, *timing, *files],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    P = f"/{prefix}"
    watch = Recorder(broker, "referee", [f"{P}/game/#", f"{P}/players/count", f"{P}/players/+/defeated"])
    teams = {name: connect_team(broker, prefix, name) for name in ("alice", "bob")}
    try:
        watch.wait_for(f"{P}/game/server", "up", timeout=30)
        for team in teams.values():
            team.join()
        watch.wait_for(f"{P}/players/count", "2", timeout=20)
        for name, team in teams.items():
            team.place_fleet(ROWS if name == "alice" else COLUMNS)
        first = watch.wait(lambda m: m.topic == f"{P}/game/turn" and bool(m.payload), timeout=20).json()
        started = time.monotonic()
        trigger.touch()  # the step, mid-turn: nobody fires
        watch.wait(lambda m: m.topic == f"{P}/players/{first['player']}/defeated", timeout=40)
        took = time.monotonic() - started
    finally:
        for team in teams.values():
            team.conn.close()
        watch.close()
        referee.terminate()
        referee.wait(10)
    assert took < 2 + 2, f"a 2 s turn lasted {took:.1f} s after the clock stepped back 30 s"
