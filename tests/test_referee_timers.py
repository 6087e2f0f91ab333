"""Deadlines driven by the referee's real timers, on a real mosquitto."""

from __future__ import annotations

from conftest import RefereeFactory, TeamFactory
from kit import COLUMNS, ROWS
from mqttkit import Recorder


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
