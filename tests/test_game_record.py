"""The game record (``/game/record``, protocol v2 section 7): the whole game
published once it is over, fleets included, and nothing of a fleet before;
cleared at reset; ``salvo journal export --record`` writes the same bytes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from salvo.arena.journal import Store
from salvo.arena.resume import make_arenas
from salvo.cli import main
from salvo.game.events import Config, Event, Phase, Result
from salvo.game.salvo_end import RECORD_CAP
from salvo.net.mqtt import Broker
from salvo.referee.service import Referee
from salvo.sdk.bots import make_strategy
from salvo.sdk.client import SalvoClient
from salvo.spec import crypto, wire
from salvo.spec.rules import FLEET, SHIP_IDS, Orientation, Placement
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, Driver, ship_cells
from mosquitto import Mosquitto
from mqttkit import Recorder

H = Orientation.HORIZONTAL
LOW: dict[str, Placement] = {s: Placement(0, 5 + i, H) for i, s in enumerate(SHIP_IDS)}
DOC = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()


class Logged(Driver):
    """A driver that keeps every event it sends, accepted or not: a journal's raw material."""

    def __init__(self, seed: int = 7, **config: Any) -> None:
        super().__init__(seed, **config)
        self.events: list[Event] = []

    def send(self, event: Event) -> Result:
        self.events.append(event)
        return super().send(event)


def cells(fleet: dict[str, Placement]) -> dict[tuple[int, int], str]:
    return {xy: ship for ship in SHIP_IDS for xy in ship_cells(fleet, ship)}


def test_the_record_is_exactly_the_game_played() -> None:
    """Three players; every salvo mixes hits, misses, repeats and a shot at
    oneself; one player is dropped for missed turns, one sunk. The record is
    checked against what the test itself fired, worked out from the fleets."""
    fleets = {"ann": ROWS, "bob": COLUMNS, "cy": LOW}
    d = Driver(seed=3, max_missed_turns=2, turn_timeout=10)
    d.start(fleets)
    assert d.game.order == ["ann", "bob", "cy"]
    hit_cells: dict[str, set[tuple[int, int]]] = {n: set() for n in fleets}
    sunk: set[tuple[str, str]] = set()
    out: set[str] = set()
    missed = 0
    to_hit = {n: list(cells(f)) for n, f in fleets.items()}
    expected: list[dict[str, Any]] = []
    for _ in range(500):
        if d.game.phase is not Phase.TURN:
            break
        turn, me = d.game.turn, d.cur
        shots: list[dict[str, Any]] = []
        if me == "cy":  # never fires: dropped at its second missed turn
            d.tick(10)
            missed += 1
        else:
            foe = "cy" if "cy" not in out and turn < 6 else next(n for n in ("ann", "bob") if n != me)
            for i in range(d.game.allowed):
                target, xy = foe, to_hit[foe][0] if to_hit[foe] else (9, 9)
                if i == 1 or not to_hit[foe]:
                    target, xy = me, (9, 9)  # at oneself, a miss
                elif i == 2 and hit_cells[foe]:
                    xy = min(hit_cells[foe])  # again at a cell hit before: a hit all the same
                else:
                    to_hit[foe].pop(0)
                hit = xy in cells(fleets[target])
                if hit:
                    hit_cells[target].add(xy)
                shots.append({"target": target, "x": xy[0], "y": xy[1], "hit": hit})
                d.fire(target, *xy)
        sunk_now = [
            {"owner": n, "ship": s}
            for n in d.game.order
            for s in SHIP_IDS
            if (n, s) not in sunk and set(ship_cells(fleets[n], s)) <= hit_cells[n]
        ]
        sunk |= {(x["owner"], x["ship"]) for x in sunk_now}
        gone = [n for n in d.game.order if n not in out and all((n, s) in sunk for s in SHIP_IDS)]
        if me == "cy" and missed == 2:
            gone.append("cy")
        out |= set(gone)
        expected.append(
            {
                "turn": turn,
                "player": me,
                "shots": shots,
                "hits": sum(s["hit"] for s in shots),
                "sunk": sunk_now,
                "defeated": gone,
            }
        )
    assert d.game.phase is Phase.OVER
    record = json.loads(d.game.retained[d.t.record])
    fleet_json = {
        n: {s: {"x": p.x, "y": p.y, "orientation": p.orientation.value} for s, p in f.items()}
        for n, f in fleets.items()
    }
    assert record == {
        "game": d.game.game_id,
        "players": ["ann", "bob", "cy"],
        "fleets": fleet_json,
        "salvos": expected,
        "winner": d.game.winner,
        "termination": "victory",
    }
    assert any(s["defeated"] == ["cy"] for s in expected) and any(s["sunk"] for s in expected)
    wire.GameRecord.model_validate_json(d.game.retained[d.t.record])


def test_the_record_comes_with_the_stats_before_over_and_is_cleared_at_reset() -> None:
    d = Driver(seed=5, reset_after=100)
    d.start({"a": ROWS, "b": COLUMNS})
    assert d.t.record not in {p.topic for p in d.published}  # nothing of the game before it is over
    winner = d.cur
    loser = next(n for n in d.game.order if n != winner)
    targets = [(loser, x, y) for x, y in cells(d.fleets[loser])]
    last: list[str] = []
    while d.game.phase is Phase.TURN:
        if d.cur == winner:
            shots, targets = targets[: d.game.allowed], targets[d.game.allowed :]
            last = [p.topic for p in d.play_turn(shots + d.misses(loser, d.game.allowed - len(shots)))]
        else:
            d.idle_turn()
    stats_b = last.index(d.t.stats_player(d.game.order[-1]))
    assert stats_b < last.index(d.t.record) < last.index(d.t.state)
    cleared = d.tick(100)
    assert any(p.topic == d.t.record and p.payload == "" for p in cleared)
    assert d.t.record not in d.game.retained and d.game.record is None


def test_a_replay_of_the_events_builds_the_same_bytes() -> None:
    d = Logged(seed=8)
    events = d.events
    d.start({"a": ROWS, "b": COLUMNS})
    d.wear_down(d.game.order[1], [xy for f in [d.fleets[d.game.order[1]]] for xy in cells(f)], d.game.order[0])
    again = Driver(seed=8)
    for ev in events:
        again.send(ev)
    assert again.game.retained[again.t.record] == d.game.retained[d.t.record]


def test_an_oversized_record_is_kept_not_published() -> None:
    assert RECORD_CAP < 65536 - 200  # the shipped broker's max_packet_size, with room for topic and header
    d = Driver(seed=8)
    d.start({"a": ROWS, "b": COLUMNS})
    d.idle_turn()
    d.game.salvos[0].shots.extend([("b", 99, False)] * (RECORD_CAP // 40))  # as if a long game went before
    winner = d.cur
    loser = next(n for n in d.game.order if n != winner)
    d.wear_down(loser, list(cells(d.fleets[loser])), winner)
    assert d.game.phase is Phase.OVER
    assert d.game.record is not None and len(d.game.record) > RECORD_CAP
    assert d.t.record not in d.game.retained  # salvo journal export --record writes it


def test_the_documented_record_is_a_record_of_this_referee() -> None:
    """Section 7's example: a game ann wins by forfeit in two turns."""
    d = Driver(seed=1, max_missed_turns=1, turn_timeout=10)
    d.start({"ann": ROWS, "bob": COLUMNS})
    if d.cur != "ann":
        d.idle_turn()
    d.play_turn([("bob", 5, 0), ("bob", 5, 1), ("bob", 0, 9), ("bob", 5, 0), ("ann", 9, 9)])
    d.tick(10)  # bob fires nothing: dropped
    published = d.game.retained[d.t.record]
    block = re.search(r"```json\n(\{\s*\"game\".*?)\n```", DOC, flags=re.DOTALL)
    assert block, "no record example in docs/protocol.md"
    documented = json.loads(block[1])
    documented["game"] = d.game.game_id
    assert documented == json.loads(published)


# -- through the real broker -------------------------------------------------------------------


def test_a_watcher_sees_no_fleet_before_the_record_and_the_journal_exports_it(
    broker: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    key = crypto.load_or_create_referee_key(tmp_path / "referee.key")
    state = tmp_path / "state.db"
    store = Store(state)
    arenas = make_arenas([prefix], Config(turn_timeout=10, reset_after=3), 1, key, store)
    ref = Referee(
        arenas, Broker.from_url(broker.url("referee")), client_id=f"ref-{uuid.uuid4().hex[:8]}", journal=store
    )
    ref.start()
    t = Topics(prefix)
    anonymous = Recorder(broker, None, ["#"])  # the broker delivers only what anybody may read
    secrets = {n: f"{n}-{uuid.uuid4().hex[:6]}" for n in ("alice", "bob")}
    clients: list[SalvoClient] = []
    try:
        assert ref.wait_connected(10)
        clients = [SalvoClient(n, s, broker.url(n), prefix=prefix).connect() for n, s in secrets.items()]
        threads = [threading.Thread(target=c.play, args=(make_strategy("density", 1),), daemon=True) for c in clients]
        for thread in threads:
            thread.start()
        anonymous.wait_for(t.state, "over", timeout=60)
        mine = [m for m in anonymous.messages if m.topic.startswith(f"/{prefix}/")]
        record_at = next(i for i, m in enumerate(mine) if m.topic == t.record and m.payload)
        over_at = next(i for i, m in enumerate(mine) if m.topic == t.state and m.text == "over")
        assert record_at < over_at
        before = mine[:record_at]
        assert not any(m.topic.endswith(("/place", "/approved", "/hit", "/fire")) for m in before)
        assert not any('"orientation"' in m.text or "coordinates" in m.text for m in before)
        record = json.loads(mine[record_at].payload)
        assert set(record["fleets"]) == {"alice", "bob"} and all(
            len(f) == len(FLEET) for f in record["fleets"].values()
        )
        assert record["winner"] == anonymous.text(t.winner)
        anonymous.wait(lambda m: m.topic == t.record and not m.payload, timeout=30)  # cleared at reset
        for c in clients:
            c.close()
        ref.stop()
        store.close()
        exported = tmp_path / "record.json"
        result = CliRunner().invoke(
            main,
            ["journal", "export", str(exported), "--record", "--state", str(state), "--arena", prefix, "--game", "1"],
        )
        assert result.exit_code == 0, result.output
        assert exported.read_bytes() == mine[record_at].payload
        # The same game in the replay viewer, by its journal number.
        assert _replayed(["--state", str(state), "--arena", prefix, "--game", "1"]) == mine[record_at].payload
        refused = CliRunner().invoke(main, ["replay", "--state", str(state), "--arena", prefix, "--game", "9"])
        assert refused.exit_code != 0 and "no game 9" in refused.output
        unnamed = CliRunner().invoke(main, ["replay", "--state", str(state), "--no-browser"])  # no --arena
        assert unnamed.exit_code != 0 and f"its arenas: {prefix}; choose one with --arena" in unnamed.output
        both = CliRunner().invoke(main, ["replay", str(exported), "--state", str(state), "--no-browser"])
        assert both.exit_code == 2 and "one of them" in both.output
    finally:
        for c in clients:
            c.close()
        anonymous.close()
        ref.stop()
        store.close()


def _replayed(args: list[str]) -> bytes:
    """What ``salvo replay ARGS`` serves as its record."""
    cmd = [sys.executable, "-m", "salvo", "replay", *args, "--no-browser"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = next(w for w in line.split() if w.startswith("http://"))
        return bytes(urllib.request.urlopen(url.removesuffix("replay") + "record", timeout=5).read())
    finally:
        proc.terminate()
        proc.wait(10)
