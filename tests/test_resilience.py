"""Real processes, real mosquitto: a referee killed with SIGKILL and started
again finishes the same game as one that never died; messages sent while it
was down are applied; broker restarts are survived."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.net.mqtt import Broker
from salvo.referee.service import Referee
from salvo.sdk.bots import make_strategy
from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import GameRecord
from salvo.spec import crypto
from salvo.tools.stress import RefereeProcess

from conftest import BrokerFactory, RefereeFactory, TeamFactory
from kit import COLUMNS, ROWS, all_cells
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder, connect_team, wait_until

SWEEP = [(x, y) for y in range(10) for x in range(10)]
KILL_POINTS = ["mid_lobby", "mid_placement", "mid_salvo", "after_salvo", "during_over"]


def referee_process(broker: Mosquitto, prefix: str, workdir: Path) -> RefereeProcess:
    """The same referee at every restart: fixed state file, key, seed and
    MQTT client id."""
    flags = ["--seed", "5", "--placement-timeout", "60", "--turn-timeout", "60", "--reset-after", "3"]
    return RefereeProcess(
        Broker.from_url(broker.url("referee")), [prefix], *flags, workdir=workdir, client_id=f"resilience-{prefix}"
    )


def turn_or_over(P: str, n: int) -> Callable[[Msg], bool]:
    """Turn ``n`` announced, or the game over."""
    return lambda m: (
        (m.topic == f"{P}/game/turn" and bool(m.payload) and m.json()["turn"] == n)
        or (m.topic == f"{P}/game/state" and m.payload == b"over")
    )


def salvo_of(P: str, n: int) -> Callable[[Msg], bool]:
    return lambda m: m.topic == f"{P}/game/salvo" and m.json()["turn"] == n


class ScriptedGame:
    """Two teams with fixed fleets and fixed moves: each shooter sweeps the
    other board row by row. Optionally kills the referee at one point and
    sends what comes next while it is down."""

    #: One arena for every run: its seed follows from --seed and the prefix, and
    #: each run ends with a reset that clears the retained game.
    PREFIX = f"resilience{uuid.uuid4().hex[:6]}"

    def __init__(self, broker: Mosquitto, workdir: Path) -> None:
        self.prefix = self.PREFIX
        self.P = f"/{self.prefix}"
        self.ref = referee_process(broker, self.prefix, workdir)
        self.watch = Recorder(broker, "referee", [f"{self.P}/#"])
        self.teams = {n: connect_team(broker, self.prefix, n) for n in ("alice", "bob")}
        self.swept = dict.fromkeys(self.teams, 0)
        self.sent_while_down: list[tuple[str, int, int]] = []

    def up(self, after: int) -> None:
        self.watch.wait_for(f"{self.P}/game/server", "up", after=after, timeout=30)

    def restart(self) -> int:
        """Kill -9 happened; start again; the mark from which the new run's
        messages are."""
        mark = self.watch.mark()
        self.ref.start()
        self.up(mark)
        return mark

    def play(self, kill_at: str | None = None) -> dict[str, Any]:
        P, w = self.P, self.watch
        alice, bob = self.teams["alice"], self.teams["bob"]
        self.ref.start()
        self.up(0)
        alice.join()
        w.wait_for(f"{P}/players/list", '["alice"]')
        if kill_at == "mid_lobby":
            self.ref.kill()
            bob.join()  # while the referee is down
            self.restart()
        else:
            bob.join()
        w.wait_for(f"{P}/players/count", "2")
        ships = list(ROWS.items())
        for ship, p in ships[:3]:
            alice.place(ship, p)
        for ship, _p in ships[:3]:
            w.wait_for(f"{P}/players/alice/ships/{ship}/approved", "true")
        if kill_at == "mid_placement":
            self.ref.kill()
        for ship, p in ships[3:]:
            alice.place(ship, p)
        bob.place_fleet(ROWS)
        if kill_at == "mid_placement":
            self.restart()
        turn = 0
        while True:
            turn += 1
            msg = w.wait(turn_or_over(P, turn), timeout=30, what=f"turn {turn}")
            if msg.topic.endswith("/state"):
                break
            info = msg.json()
            shooter, n = info["player"], info["shots"]
            target = "bob" if shooter == "alice" else "alice"
            cells = SWEEP[self.swept[shooter] : self.swept[shooter] + n]
            self.swept[shooter] += n
            mark = w.mark()
            if kill_at == "mid_salvo" and turn == 5:
                hit_topic = f"{P}/players/{target}/hit"
                for x, y in cells[:2]:
                    self.teams[shooter].fire(target, x, y, turn=turn)
                # (called at once: the loop variables cannot change under it)
                wait_until(lambda: len(w.on(hit_topic, after=mark)) >= 2, what="the first two hits")  # noqa: B023
                self.ref.kill()
                for x, y in cells[2:]:  # accepted only once the referee is back
                    self.teams[shooter].fire(target, x, y, turn=turn)
                    self.sent_while_down.append((target, x, y))
                before = {(m.json()["turn"], m.json()["shot"]): m.json() for m in w.on(hit_topic, after=mark)}
                back = self.restart()
                w.wait(salvo_of(P, turn), after=mark)
                # Published at least once: a hit told before the kill may come again, the same.
                again = [m.json() for m in w.on(hit_topic, after=back)]
                assert all(before[h["turn"], h["shot"]] == h for h in again if (h["turn"], h["shot"]) in before)
                got = [(h["x"], h["y"]) for h in again if (h["turn"], h["shot"]) not in before]
                assert got == cells[2:], "the shots sent while the referee was down were not applied after it returned"
            else:
                for x, y in cells:
                    self.teams[shooter].fire(target, x, y, turn=turn)
            w.wait(salvo_of(P, turn), after=mark, timeout=30)
            if kill_at == "after_salvo" and turn == 7:
                self.ref.kill()
                self.restart()
        over = w.mark()
        if kill_at == "during_over":
            self.ref.kill()
            back = self.restart()
            # the results are republished, then the reset happens on time
            assert json.loads(w.wait_for(f"{P}/game/stats/summary", after=back).payload)["winner"]
        w.wait_for(f"{P}/game/state", "lobby", after=over, timeout=30)
        return self.outcome()

    def outcome(self) -> dict[str, Any]:
        """Everything the referee published about the game, without the
        wall-clock values and the republished duplicates."""
        rel = len(self.P)
        turns: dict[int, Any] = {}
        salvos: dict[int, Any] = {}
        hits: dict[tuple[str, int, int], Any] = {}  # a hit published again is the same hit
        # (each run's game has its own random id: a hit carries its run's)
        ids = {m.text for m in self.watch.messages if m.topic[rel:] == "/game/id" and m.payload}
        flags: set[str] = set()
        final: dict[str, Any] = {}
        for m in self.watch.messages:
            topic = m.topic[rel:]
            if not m.payload or topic.endswith(("/fire", "/place", "/request_participation", "/error", "/errors")):
                continue
            if topic == "/game/turn":
                turns[m.json()["turn"]] = m.json()
            elif topic == "/game/salvo":
                salvos[m.json()["turn"]] = m.json()
            elif topic.endswith("/hit"):
                hit = m.json()
                assert hit.pop("game") in ids, f"a hit of no game this run published: {m.text}"
                assert hits.setdefault((topic, hit["turn"], hit["shot"]), hit) == hit, "a hit changed"
            elif topic.endswith(("/sunk", "/defeated")):
                flags.add(topic)
            elif topic == "/game/winner" or topic.startswith("/game/stats/"):
                value = m.json() if m.payload.startswith(b"{") else m.text
                if isinstance(value, dict):
                    value.pop("duration_s", None)
                final[topic] = value
        return {"turns": turns, "salvos": salvos, "hits": hits, "flags": flags, "final": final}

    def close(self) -> None:
        self.ref.stop()
        self.watch.close()
        for t in self.teams.values():
            t.conn.close()


@pytest.fixture(scope="module")
def reference(broker: Mosquitto, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    game = ScriptedGame(broker, tmp_path_factory.mktemp("reference"))
    try:
        outcome = game.play()
    finally:
        game.close()
    assert outcome["final"]["/game/winner"] in ("alice", "bob")
    assert len(outcome["turns"]) >= 8
    return outcome


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_sigkill_and_restart_ends_the_same_game(
    broker: Mosquitto, tmp_path: Path, reference: dict[str, Any], kill_at: str
) -> None:
    game = ScriptedGame(broker, tmp_path)
    try:
        outcome = game.play(kill_at)
        assert game.ref.kills == 1
    finally:
        game.close()
    assert outcome == reference
    if kill_at == "mid_salvo":
        assert game.sent_while_down  # and they were applied: checked in play()


# -- broker restarts ---------------------------------------------------------------------------


@pytest.fixture(params=[True, False], ids=["broker-persistence", "no-broker-persistence"])
def own_broker(request: pytest.FixtureRequest, new_broker: BrokerFactory) -> Mosquitto:
    mosq = new_broker("mosquitto", persistence=request.param)
    mosq.start()
    return mosq


def test_game_survives_a_broker_restart(own_broker: Mosquitto, tmp_path: Path) -> None:
    prefix = "restart"
    key = crypto.load_or_create_referee_key(tmp_path / "k")
    arenas = make_arenas([prefix], Config(turn_timeout=5), 3, key)
    referee = Referee(arenas, Broker.from_url(own_broker.url("referee")), client_id="restart-referee")
    referee.start()
    assert referee.wait_connected(10)
    records: dict[str, list[GameRecord]] = {}
    clients = [SalvoClient(n, f"{n}-s", own_broker.url(n), prefix=prefix).connect() for n in ("alice", "bob")]
    threads = [
        threading.Thread(
            target=lambda c=c: records.setdefault(c.name, c.play(make_strategy("density", 1))), daemon=True
        )
        for c in clients
    ]
    for t in threads:
        t.start()
    assert clients[0].wait_until(lambda v: v.turn >= 4, 30), "the game did not get going"
    own_broker.restart()  # every connection drops; retained state survives only with persistence
    for t in threads:
        t.join(120)
    try:
        assert set(records) == {"alice", "bob"}, "a bot did not finish the game"
        winners = {r[0].winner for r in records.values()}
        assert len(winners) == 1 and winners <= {"alice", "bob"}
        # the referee republished its state: a fresh spectator sees the finished game
        fresh = Recorder(own_broker, None, [f"/{prefix}/game/#"])
        fresh.wait_for(f"/{prefix}/game/server", "up")
        assert fresh.wait_for(f"/{prefix}/game/winner").text in winners
        fresh.close()
    finally:
        for c in clients:
            c.close()
        referee.stop()


def test_a_new_referee_clears_stale_retained_state(
    broker: Mosquitto, start_referee: RefereeFactory, make_team: TeamFactory, prefix: str
) -> None:
    """A referee without the previous referee's state file owns the arena:
    retained game topics it does not hold are cleared before it says 'up'.
    More of them than the broker's in-flight window (20): the sweep once
    left them unacknowledged and the referee heard nothing more."""
    P = f"/{prefix}"
    stale = {
        f"{P}/players/list": '["ghost","p0"]',
        f"{P}/players/count": "2",
        f"{P}/game/turn": '{"turn":253,"player":"ghost","shots":5}',
        f"{P}/game/winner": "ghost",
        f"{P}/game/stats/players/ghost": '{"place":1}',
        f"{P}/players/ghost/ships/carrier/approved": "true",
        f"{P}/players/ghost/defeated": "true",
        **{f"{P}/players/ghost{i}/ships/carrier/approved": "false" for i in range(30)},
    }
    old = Recorder(broker, "referee", [])
    for topic, payload in stale.items():
        old.publish(topic, payload, retain=True)
    old.publish(f"{P}/game/server", "down", retain=True)
    old.close()
    start_referee()
    fresh = Recorder(broker, None, [f"{P}/#"])  # a spectator arriving once the referee is up
    try:
        fresh.wait_for(f"{P}/game/server", "up")
        fresh.wait_for(f"{P}/game/state", "lobby")
        # A marker after the subscription: mosquitto delivers to one subscriber
        # in order, so once it is back every retained message has arrived.
        marker = uuid.uuid4().hex.encode()
        old = Recorder(broker, "referee", [])
        old.publish(f"{P}/game/hits", marker)
        old.close()
        fresh.wait(lambda m: m.payload == marker)
        latest = {m.topic: m.payload for m in fresh.messages if m.retain}  # an empty payload clears
        retained = {topic for topic, payload in latest.items() if payload}
        presence = {f"{P}/game/server", f"{P}/game/pubkey", f"{P}/game/version", f"{P}/game/state", f"{P}/game/id"}
        assert retained == presence, retained
        make_team("alice").join()  # and the referee still hears its teams
        fresh.wait_for(f"{P}/players/list", '["alice"]')
    finally:
        fresh.close()


def _salvo(m: Msg) -> tuple[int, str, int]:
    body = m.json()
    return body["turn"], body["player"], body["shots"]


def test_a_stalled_broker_costs_nobody_a_turn(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """The broker frozen (SIGSTOP) for longer than a turn: its connections
    look alive, nobody can act, and the turn timers fired regardless (1-4
    turns lost a freeze; once a player was dropped and the game decided
    during it). The referee's probe through the broker does not come back:
    within about a second the game's timers wait, and the turn gets the
    frozen time back. The player whose turn it was fires after the freeze;
    its salvo counts and nobody is dropped."""
    mosq = new_broker("stalled")
    mosq.start()
    prefix = "stalled"
    P = f"/{prefix}"
    key = crypto.load_or_create_referee_key(tmp_path / "k")
    referee = Referee(
        make_arenas([prefix], Config(turn_timeout=3, max_missed_turns=1), 3, key),
        Broker.from_url(mosq.url("referee")),
        client_id="stalled-referee",
    )
    referee.start()
    watch = Recorder(mosq, "referee", [f"{P}/game/#", f"{P}/players/+/defeated"])
    clients = {
        n: SalvoClient(n, f"{n}-secret-for-tests", mosq.url(n), prefix=prefix).connect() for n in ("alice", "bob")
    }
    try:
        assert referee.wait_connected(10)
        for c in clients.values():
            c.join()
        clients["alice"].place_fleet(ROWS)
        clients["bob"].place_fleet(COLUMNS)
        first = watch.wait(lambda m: m.topic == f"{P}/game/turn" and bool(m.payload), timeout=20).json()
        shooter, target = first["player"], "bob" if first["player"] == "alice" else "alice"
        assert mosq.proc is not None
        mosq.proc.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            # the turn's 3 s pass twice over, frozen: nothing to wait on in a stopped broker
            time.sleep(6)
        finally:
            mosq.proc.send_signal(signal.SIGCONT)
        print(f"\nbroker frozen {time.monotonic() - frozen:.1f} s during a 3 s turn")
        mark = watch.mark()
        shots = [(target, x, y) for x, y in all_cells(COLUMNS if target == "bob" else ROWS)[: first["shots"]]]
        clients[shooter].fire_salvo(shots)
        whole = (first["turn"], shooter, first["shots"])
        watch.wait(
            lambda m: m.topic == f"{P}/game/salvo" and bool(m.payload) and _salvo(m) == whole, after=mark, timeout=20
        )
        assert not [m for m in watch.since(0) if m.topic.endswith("/defeated")], "a player was dropped"
    finally:
        for c in clients.values():
            c.close()
        watch.close()
        referee.stop()
