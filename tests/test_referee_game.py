"""A whole 3-player game through the real referee on a real mosquitto, from
join to winner to reset, checking every topic and payload of the spec against
an independent model of what must happen."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from salvo.spec.rules import SHIP_IDS, Orientation, Placement
from salvo.tools.conformance.model import as_fleet
from salvo.tools.oracle import Oracle

from conftest import RefereeFactory, TeamFactory
from kit import COLUMNS, ROWS, all_cells
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder, Team, wait_until

LOW_ROWS = {s: Placement(0, 5 + i, Orientation.HORIZONTAL) for i, s in enumerate(SHIP_IDS)}
FLEETS = {"alice": ROWS, "bob": COLUMNS, "carol": LOW_ROWS}
PRIORITY = ["carol", "bob", "alice"]  # whom everybody shoots first
INBOUND = ("/fire", "/place", "/request_participation")


class Model(Oracle):
    """What the referee must conclude: the shared oracle, with this test's salvos."""

    def __init__(self) -> None:
        # the fleets' order, not the play order: the order sinks are checked in
        super().__init__({n: as_fleet(f) for n, f in FLEETS.items()}, list(FLEETS))

    def salvo(self, shooter: str, turn: int, allowed: int) -> tuple[str, list[tuple[int, int]]]:
        target = next(n for n in PRIORITY if n != shooter and n not in self.defeated)
        todo = [c for c in all_cells(FLEETS[target]) if c not in self.hit[target]]
        empty = [(x, y) for y in range(10) for x in range(10) if (x, y) not in all_cells(FLEETS[target])]
        cells = todo[: max(1, allowed - 1)]
        return target, cells + empty[: allowed - len(cells)]

    def apply(
        self, shooter: str, turn: int, target: str, cells: list[tuple[int, int]]
    ) -> tuple[int, list[tuple[str, str]], list[str]]:
        outcome = self.fire(shooter, turn, [(target, c) for c in cells])
        return outcome.hits, outcome.sunk, outcome.defeated


def referee_published(messages: list[Msg]) -> list[Msg]:
    return [m for m in messages if not m.topic.endswith(INBOUND)]


def numbered(topic: str, n: int) -> Callable[[Msg], bool]:
    """A message on ``topic`` (/game/turn, /game/salvo) for turn ``n``."""
    return lambda m: m.topic == topic and bool(m.payload) and m.json()["turn"] == n


def on_topic(topic: str) -> Callable[[Msg], bool]:
    return lambda m: m.topic == topic


def test_full_three_player_game(
    broker: Mosquitto, start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(turn_timeout=15, reset_after=1.5, seed=4)
    P = f"/{prefix}"
    teams: dict[str, Team] = {n: make_team(n) for n in FLEETS}

    # -- presence ---------------------------------------------------------------
    assert watcher.wait_for(f"{P}/game/server", "up").retain
    pubkey = watcher.wait_for(f"{P}/game/pubkey")
    assert pubkey.retain and len(base64.b64decode(pubkey.payload, validate=True)) == 32
    assert watcher.wait_for(f"{P}/game/state", "lobby").retain
    game_id = watcher.wait_for(f"{P}/game/id")
    assert game_id.retain and len(game_id.text) == 16 and int(game_id.text, 16) >= 0
    assert watcher.wait_for(f"{P}/game/version", "2.1").retain  # (v2.1)

    # -- lobby: joins (one plain, two sealed) -----------------------------------------
    teams["alice"].join()
    watcher.wait_for(f"{P}/players/count", "1")
    teams["bob"].join(teams["bob"].current(teams["bob"].t.pubkey))
    watcher.wait_for(f"{P}/players/count", "2")
    teams["carol"].join(teams["carol"].current(teams["carol"].t.pubkey))
    count = watcher.wait_for(f"{P}/players/count", "3")
    assert count.retain
    lst = watcher.wait_for(f"{P}/players/list", '["alice","bob","carol"]')
    assert lst.retain
    for name in FLEETS:
        for ship in SHIP_IDS:
            assert watcher.wait_for(f"{P}/players/{name}/ships/{ship}/approved", "false").retain
    deadline = watcher.wait(lambda m: m.topic == f"{P}/game/deadline")
    assert deadline.retain and deadline.json()["phase"] == "placement"
    # a repeated join changes nothing
    mark = watcher.mark()
    teams["alice"].join()

    # -- placement: fleets complete in the order carol, alice, bob ---------------------
    for name in ["carol", "alice", "bob"]:
        teams[name].place_fleet(FLEETS[name])
        for ship in SHIP_IDS:
            approved = teams[name].conn.wait_for(f"{P}/players/{name}/ships/{ship}/approved", "true")
            assert approved.retain
    assert watcher.wait_for(f"{P}/game/state", "turn").retain
    assert not [m for m in watcher.on(f"{P}/players/count", after=mark) if m.payload != b"3"]
    assert watcher.text(f"{P}/players/list") == '["carol","alice","bob"]'

    # -- turns ------------------------------------------------------------------------------
    model = Model()
    order = ["carol", "alice", "bob"]
    expected_player: str | None = None
    turn_no = 0
    while True:
        turn_no += 1
        turn_msg = watcher.wait(numbered(f"{P}/game/turn", turn_no))
        assert turn_msg.retain
        info = turn_msg.json()
        shooter = info["player"]
        if expected_player is not None:
            assert shooter == expected_player
        assert info["shots"] == model.afloat(shooter)
        current = watcher.wait(lambda m: m.topic == f"{P}/game/current", after=watcher.messages.index(turn_msg))
        assert current.text == shooter and current.retain
        mark = watcher.mark()
        target, cells = model.salvo(shooter, turn_no, info["shots"])
        target_mark = teams[target].conn.mark()
        for x, y in cells:
            teams[shooter].fire(target, x, y, turn=turn_no)
        salvo = watcher.wait(numbered(f"{P}/game/salvo", turn_no), after=mark)
        hits, sunk, defeated = model.apply(shooter, turn_no, target, cells)
        assert salvo.retain and salvo.json() == {"turn": turn_no, "player": shooter, "shots": len(cells), "hits": hits}

        # the target saw every shot on its private topic, not retained
        hit_topic = f"{P}/players/{target}/hit"
        target_rec = teams[target].conn
        n_cells = len(cells)
        wait_until(lambda: len(target_rec.on(hit_topic, after=target_mark)) >= n_cells, what="hits")  # noqa: B023
        got = target_rec.on(hit_topic, after=target_mark)
        assert [m.json() for m in got] == [
            {"x": x, "y": y, "turn": turn_no, "shot": k, "game": game_id.text} for k, (x, y) in enumerate(cells, 1)
        ]
        assert not any(m.retain for m in got)

        # salvo end order: hits -> salvo -> sunk... -> defeated... -> next turn / over
        over = len(model.defeated) >= 2
        tail_topic = f"{P}/game/state" if over else f"{P}/game/current"
        watcher.wait(on_topic(tail_topic), after=watcher.messages.index(salvo))
        after = referee_published(watcher.messages[mark:])
        first = next(i for i, m in enumerate(after) if m.topic == f"{P}/game/hits")
        seq = after[first:]
        assert seq[0].text == str(hits) and not seq[0].retain
        assert seq[1] == salvo
        k = 2
        for owner, ship in sunk:
            assert (seq[k].topic, seq[k].text, seq[k].retain) == (
                f"{P}/players/{owner}/ships/{ship}/sunk",
                "true",
                True,
            )
            k += 1
        for name in defeated:
            assert (seq[k].topic, seq[k].text, seq[k].retain) == (f"{P}/players/{name}/defeated", "true", True)
            k += 1
        if over:
            assert [m.topic for m in seq[k:]] == [
                f"{P}/game/winner",
                f"{P}/game/stats/summary",
                *[f"{P}/game/stats/players/{n}" for n in order],
                f"{P}/game/record",
                f"{P}/game/current",
                f"{P}/game/deadline",
                f"{P}/game/state",
            ]
            break
        assert [m.topic for m in seq[k : k + 3]] == [f"{P}/game/deadline", f"{P}/game/turn", f"{P}/game/current"]
        i = order.index(shooter)
        expected_player = next(n for n in order[i + 1 :] + order[: i + 1] if n not in model.defeated)

    # -- over ---------------------------------------------------------------------------------
    winner = next(n for n in FLEETS if n not in model.defeated)
    assert watcher.wait_for(f"{P}/game/winner", winner).retain
    summary = watcher.wait_for(f"{P}/game/stats/summary").json()
    assert summary["winner"] == winner and summary["turns"] == turn_no and summary["termination"] == "victory"
    assert summary["shots"] == sum(model.shots.values()) and summary["hits"] == sum(model.hits.values())
    assert summary["duration_s"] >= 0
    for name in FLEETS:
        stats = watcher.wait_for(f"{P}/game/stats/players/{name}")
        assert stats.retain
        assert stats.json() == model.stats(name)
    over_msg = watcher.wait_for(f"{P}/game/state", "over")
    assert over_msg.retain
    assert json.loads(watcher.text(f"{P}/game/deadline") or "null")["phase"] == "reset"

    # -- reset: every retained topic of the game is cleared, the lobby reopens ---------------
    over_at = watcher.messages.index(over_msg)
    lobby = watcher.wait_for(f"{P}/game/state", "lobby", after=over_at, timeout=10)
    assert lobby.retain
    cleared = {m.topic for m in watcher.messages[over_at:] if m.retain and m.payload == b""}
    assert {f"{P}/game/winner", f"{P}/game/stats/summary", f"{P}/players/list", f"{P}/game/salvo"} <= cleared
    fresh = Recorder(broker, "referee", [f"{P}/#"])
    try:
        fresh.wait_for(f"{P}/game/state", "lobby")
        fresh.wait_for(f"{P}/game/pubkey")
        fresh.wait_for(f"{P}/game/server", "up")
        retained = {m.topic: m.payload for m in fresh.messages if m.retain}
        presence = {f"{P}/game/state", f"{P}/game/id", f"{P}/game/server", f"{P}/game/pubkey", f"{P}/game/version"}
        assert set(retained) == presence
        assert retained[f"{P}/game/id"] != game_id.payload  # every game has a new id
    finally:
        fresh.close()
