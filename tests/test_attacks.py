"""The adversarial review, replayed: what a competing team did to the v1
referee on the shipped set-up (mosquitto with the shipped mosquitto.conf and
the generated ACL, registered teams), each attack run again here against
the real broker and referee and shown to fail while the game stays correct.
docs/security.md maps every attack to its test. Sniffing the network (plain
listener vs TLS) is in test_transport.py; the rules themselves, message by
message and without a broker, in test_arena.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.net.mqtt import Broker, new_client
from salvo.organiser.teams import add_team
from salvo.referee.admission import Registry
from salvo.referee.flood import REJECT_LINES
from salvo.referee.service import Referee
from salvo.sdk.client import SalvoClient
from salvo.spec import crypto
from salvo.tools.stress import RefereeProcess

from conftest import BrokerFactory, RefereeFactory, TeamFactory
from kit import COLUMNS, ROWS, all_cells
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder, Team, connect_team, wait_until

FLEETS = {"alice": ROWS, "bob": COLUMNS}


def to_turn_one(teams: dict[str, Team], watcher: Recorder, P: str) -> dict[str, Any]:
    """Join and place both teams; the first /game/turn of that game."""
    mark = watcher.mark()
    for team in teams.values():
        team.join()
    watcher.wait_for(f"{P}/players/count", str(len(teams)), after=mark)
    for name, team in teams.items():
        team.place_fleet(FLEETS[name])
    turn: dict[str, Any] = watcher.wait(lambda m: m.topic == f"{P}/game/turn" and bool(m.payload), after=mark).json()
    return turn


def captured_shot(teams: dict[str, Team], watcher: Recorder, P: str) -> tuple[str, str, Msg]:
    """The current player fires one shot; the fire message as it crossed the
    broker (read here with the referee's rights, as an attacker would on a
    broker without the shipped ACL): (shooter, target, message)."""
    turn = watcher.latest(f"{P}/game/turn")
    assert turn is not None
    shooter = turn.json()["player"]
    target = next(n for n in teams if n != shooter)
    mark = watcher.mark()
    teams[shooter].fire(target, 9, 9, turn=turn.json()["turn"])
    fire = watcher.wait(lambda m: m.topic == f"{P}/players/{target}/fire", after=mark)
    watcher.wait(lambda m: m.topic == f"{P}/players/{target}/hit", after=mark)
    return shooter, target, fire


def refused_with(rec: Recorder, topic: str, after: int) -> str:
    """The code of the next error report on ``topic``."""
    return str(rec.wait(lambda m: m.topic == topic, after=after).json()["code"])


# -- 1. critical: a target replays the shots aimed at it ------------------------------------


def test_a_team_cannot_read_any_fire_topic_not_even_its_own(
    broker: Mosquitto, start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(turn_timeout=20)
    P = f"/{prefix}"
    teams = {n: make_team(n) for n in FLEETS}
    to_turn_one(teams, watcher, P)
    spies = {n: Recorder(broker, n, [f"{P}/players/+/fire", f"{P}/players/{n}/hit"]) for n in FLEETS}
    try:
        _shooter, target, _fire = captured_shot(teams, watcher, P)
        # The target's hit is published after the referee read the fire message:
        # had the target been allowed to read the fire topic, it would have it by now.
        spies[target].wait(lambda m: m.topic == f"{P}/players/{target}/hit")
        for spy in spies.values():
            assert not [m for m in spy.messages if m.topic.endswith("/fire")], "a team read a fire message"
    finally:
        for spy in spies.values():
            spy.close()


def test_a_captured_shot_redirected_at_another_target_is_refused_and_the_game_stays_right(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    """The review's scenario: the target re-publishes the shots aimed at it on
    the shooter's own fire topic, so that the shooter shoots itself."""
    ref = start_referee(turn_timeout=20)
    P = f"/{prefix}"
    teams = {n: make_team(n) for n in FLEETS}
    to_turn_one(teams, watcher, P)
    shooter, target, fire = captured_shot(teams, watcher, P)
    game = ref.runners[0].arena.game
    before = (game.fired, game.players[shooter].hits, dict(game.players[shooter].damage))
    mark = watcher.mark()
    teams[target].conn.publish(f"{P}/players/{shooter}/fire", fire.payload)  # the victim "shoots itself"
    # Whose key opens it is the sender: the refusal goes to the shooter, who learns of the attempt.
    assert refused_with(watcher, f"{P}/players/{shooter}/error", mark) == "replayed"
    assert not watcher.on(f"{P}/players/{shooter}/hit", after=mark)
    assert (game.fired, game.players[shooter].hits, dict(game.players[shooter].damage)) == before
    # and once seen, that signature is spent: not even its own topic takes it again
    mark = watcher.mark()
    watcher.publish(f"{P}/players/{target}/fire", fire.payload)
    watcher.publish(f"{P}/players/{target}/fire", "not json")  # answered after it: then it was handled
    watcher.wait(lambda m: m.topic == f"{P}/game/errors", after=mark)
    assert not watcher.on(f"{P}/players/{target}/hit", after=mark)  # (an accepted shot: ignored in silence)
    assert not watcher.on(f"{P}/players/{shooter}/error", after=mark)
    assert game.fired == before[0]


def test_a_captured_shot_replayed_in_another_arena_is_refused(
    start_referee: RefereeFactory, make_team: TeamFactory, broker: Mosquitto, prefix: str
) -> None:
    other = f"{prefix}b"
    start_referee(prefixes=[prefix, other], turn_timeout=20, seed=1)
    watch = Recorder(broker, "referee", [f"/{prefix}/#", f"/{other}/#"])
    try:
        here = {n: connect_team(broker, prefix, n) for n in FLEETS}
        there = {n: connect_team(broker, other, n) for n in FLEETS}
        to_turn_one(here, watch, f"/{prefix}")
        to_turn_one(there, watch, f"/{other}")
        shooter, target, fire = captured_shot(here, watch, f"/{prefix}")
        mark = watch.mark()
        there[target].conn.publish(f"/{other}/players/{target}/fire", fire.payload)
        assert refused_with(watch, f"/{other}/players/{shooter}/error", mark) == "wrong_game"
        assert not watch.on(f"/{other}/players/{target}/hit", after=mark)
    finally:
        for team in [*here.values(), *there.values()]:
            team.conn.close()
        watch.close()


def test_a_captured_shot_replayed_in_a_later_game_is_refused(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    # Idle turns drop a player fast: game 1 ends, resets, and game 2 begins.
    start_referee(turn_timeout=0.5, max_missed_turns=1, reset_after=0.5)
    P = f"/{prefix}"
    teams = {n: make_team(n) for n in FLEETS}
    to_turn_one(teams, watcher, P)
    shooter, target, fire = captured_shot(teams, watcher, P)
    first_id = teams[target].game_id()
    watcher.wait_for(f"{P}/game/state", "over")
    lobby = watcher.wait_for(f"{P}/game/state", "lobby", after=watcher.mark() - 1)
    # The new id is published before the lobby, but on the team's own connection.
    wait_until(lambda: teams[target].game_id() != first_id, what="the new game's id at the target")
    mark = watcher.messages.index(lobby)
    to_turn_one(teams, watcher, P)
    # Turn 1 again, the same two players: in v1 this signature would have been good.
    watcher.wait(lambda m: m.topic == f"{P}/game/turn" and bool(m.payload) and m.json()["turn"] == 1, after=mark)
    mark = watcher.mark()
    teams[target].conn.publish(f"{P}/players/{target}/fire", fire.payload)
    assert refused_with(watcher, f"{P}/players/{shooter}/error", mark) == "wrong_game"
    assert not watcher.on(f"{P}/players/{target}/hit", after=mark)


def test_a_captured_shot_replayed_under_a_fresh_journal_is_refused(
    broker: Mosquitto, start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    P = f"/{prefix}"
    first = start_referee(turn_timeout=20)
    teams = {n: make_team(n) for n in FLEETS}
    to_turn_one(teams, watcher, P)
    shooter, target, fire = captured_shot(teams, watcher, P)
    first.stop()
    # A referee with a new state file (or another referee) on the same arena:
    # its game ids come from a new random key.
    mark = watcher.mark()
    start_referee(turn_timeout=20)
    old_id = fire.json()["data"]["game"]
    watcher.wait(lambda m: m.topic == f"{P}/game/id" and bool(m.payload) and m.text != old_id, after=mark)
    to_turn_one(teams, watcher, P)
    mark = watcher.mark()
    teams[target].conn.publish(f"{P}/players/{target}/fire", fire.payload)
    assert refused_with(watcher, f"{P}/players/{shooter}/error", mark) == "wrong_game"
    assert not watcher.on(f"{P}/players/{target}/hit", after=mark)


# -- 2. high: forged join refusals ------------------------------------------------------------


def forge_refusals(broker: Mosquitto, P: str, name: str, stop: threading.Event) -> threading.Thread:
    """Mallory publishes joins in ``name``'s name with wrong secrets, all the time."""

    def run() -> None:
        rec = Recorder(broker, "mallory", [])
        try:
            while not stop.is_set():
                rec.publish(f"{P}/game/request_participation", json.dumps({"name": name, "secret": "wrong"}))
                stop.wait(0.02)
        finally:
            rec.close()

    thread = threading.Thread(target=run, name="forger", daemon=True)
    thread.start()
    return thread


def registered(tmp_path: Path, *names: str) -> Registry:
    """A team registry, as `salvo teams add` writes it (a shared network needs one)."""
    path = tmp_path / "teams.json"
    for name in names:
        add_team(path, tmp_path / "passwd", name, secret=f"{name}-secret-for-tests")
    return Registry(path)


def test_forged_refusals_in_a_teams_name_do_not_stop_it_from_joining(
    broker: Mosquitto, start_referee: RefereeFactory, watcher: Recorder, prefix: str, tmp_path: Path
) -> None:
    start_referee(registry=registered(tmp_path, "alice", "bob"))
    P = f"/{prefix}"
    stop = threading.Event()
    forger = forge_refusals(broker, P, "alice", stop)
    client = SalvoClient("alice", "alice-secret-for-tests", broker.url("alice"), prefix=prefix, sealed=True)
    try:
        # the forged refusals are out there, on the public /game/errors
        watcher.wait(lambda m: m.topic == f"{P}/game/errors")
        client.connect()
        client.join()  # believes only refusals that echo its own request_id
        assert "alice" in client.view.players
        watcher.sync(f"{P}/sync")  # every refusal published so far is here
        assert not watcher.on(f"{P}/players/alice/error"), "a refusal reached the team's own error topic"
    finally:
        stop.set()
        forger.join(5)
        client.close()


def test_a_bot_plays_through_a_flood_of_forged_refusals(
    broker: Mosquitto,
    start_referee: RefereeFactory,
    make_team: TeamFactory,
    watcher: Recorder,
    prefix: str,
    tmp_path: Path,
) -> None:
    """In v1 `salvo bot` took a forged refusal as its own and exited 1 (and a
    tournament team forfeited)."""
    start_referee(turn_timeout=5, registry=registered(tmp_path, "alice", "bob"))
    P = f"/{prefix}"
    stop = threading.Event()
    forger = forge_refusals(broker, P, "alice", stop)
    bot = subprocess.Popen(
        [
            *(sys.executable, "-m", "salvo", "bot", "--broker", broker.url("alice"), "--name", "alice"),
            *("--secret", "alice-secret-for-tests", "--prefix", prefix, "--games", "1", "--seed", "3"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        bob = make_team("bob")
        watcher.wait_for(f"{P}/players/list", '["alice"]', timeout=30)
        bob.join()
        watcher.wait_for(f"{P}/players/list", '["alice","bob"]')  # joined (its key derived): now place
        bob.place_fleet(COLUMNS)
        # bob idles: alice's bot sinks him (or he times out); either way alice wins
        try:
            out, _ = bot.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            bot.kill()
            out, _ = bot.communicate()
            raise AssertionError(f"the bot did not finish its game: {out}") from None
        assert bot.returncode == 0, out
        assert "winner alice" in out
    finally:
        stop.set()
        forger.join(5)
        if bot.poll() is None:
            bot.kill()


# -- 4. medium: "referee busy" lockout ---------------------------------------------------------


def test_a_join_flood_on_every_registered_name_does_not_lock_out_a_team(
    broker: Mosquitto, start_referee: RefereeFactory, watcher: Recorder, prefix: str, tmp_path: Path
) -> None:
    names = ["alice", "bob", "carol", "dave"]
    start_referee(registry=registered(tmp_path, *names))
    P = f"/{prefix}"
    stop = threading.Event()
    sent = [0]

    def flood() -> None:  # ~40 joins/s with registered names and random secrets, the victim's included
        rec = Recorder(broker, "mallory", [])
        try:
            while not stop.is_set():
                for name in names:
                    body = {"name": name, "secret": os.urandom(8).hex()}
                    rec.publish(f"{P}/game/request_participation", json.dumps(body))
                    sent[0] += 1
                stop.wait(0.1)
        finally:
            rec.close()

    flooder = threading.Thread(target=flood, daemon=True)
    started = time.monotonic()
    flooder.start()
    client = SalvoClient("carol", "carol-secret-for-tests", broker.url("carol"), prefix=prefix)
    try:
        wait_until(lambda: sent[0] >= 40, what="the flood under way")
        client.connect()
        t0, before = time.monotonic(), sent[0]
        client.join(timeout=10)  # within seconds, not locked out
        took = time.monotonic() - t0
        assert "carol" in client.view.players
        rate = sent[0] / (time.monotonic() - started)
        print(f"\njoin flood: carol joined in {took:.2f} s under {rate:.0f} forged joins/s ({before} sent before)")
        refusals = [m.json()["code"] for m in watcher.on(f"{P}/game/errors")]
        assert refusals and set(refusals) <= {"wrong_secret", "busy"}
    finally:
        stop.set()
        flooder.join(5)
        client.close()


# -- 5. medium: lobby squatting -----------------------------------------------------------------


def test_names_that_join_and_never_place_are_removed_at_the_deadline(
    broker: Mosquitto, start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    start_referee(placement_timeout=2, max_players=8)  # no --teams: names are first come, first served
    P = f"/{prefix}"
    mallory = Recorder(broker, "mallory", [])
    try:
        for i in range(8):
            mallory.publish(f"{P}/game/request_participation", json.dumps({"name": f"squat{i}", "secret": "s"}))
        watcher.wait_for(f"{P}/players/count", "8")
        alice = make_team("alice")
        alice.join(request_id="a1")
        full = watcher.wait(lambda m: m.topic == f"{P}/game/errors" and m.json().get("request_id") == "a1")
        assert full.json()["code"] == "lobby_full"
        # the deadline passes: the squatters are gone, told why
        watcher.wait_for(f"{P}/players/list", "[]", timeout=10)
        assert {m.json()["code"] for m in watcher.messages if m.topic.endswith("/error")} == {"left_out"}
        bob = make_team("bob")
        for team, fleet in ((alice, ROWS), (bob, COLUMNS)):  # each places right after joining
            team.join()
            watcher.wait_for(f"{P}/players/{team.name}/ships/carrier/approved", "false")
            team.place_fleet(fleet)
        watcher.wait_for(f"{P}/game/state", "turn")
    finally:
        mallory.close()


# -- 6. medium: client-id takeover ----------------------------------------------------------------


def squat_client_id(broker: Mosquitto, client_id: str) -> paho.Client:
    """Connect once with ``client_id`` as another team would."""
    client = new_client(Broker.from_url(broker.url("mallory")), client_id)
    connected = threading.Event()
    client.on_connect = lambda *_a: connected.set()
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    assert connected.wait(10)
    return client


def test_the_old_guessable_client_ids_take_nothing_over(broker: Mosquitto, prefix: str, tmp_path: Path) -> None:
    P = f"/{prefix}"
    watch = Recorder(broker, "referee", [f"{P}/game/server"])
    with RefereeProcess(Broker.from_url(broker.url("referee")), [prefix], workdir=tmp_path, client_id="") as ref:
        watch.wait_for(f"{P}/game/server", "up")  # (this watcher's copy of it too: a busy machine delivers late)
        mark = watch.mark()
        squatters = [squat_client_id(broker, f"salvo-referee-{prefix}{tail}") for tail in ("", "-out")]
        try:
            # the referee's ids are not those: its last will never fires
            marker = uuid.uuid4().hex
            watch.publish(f"{P}/game/server", marker)  # (a marker after the squatters' connects)
            watch.wait(lambda m: m.text == marker, after=mark)
            assert [m.text for m in watch.since(mark)] == [marker]
            assert ref.proc is not None and ref.proc.poll() is None
        finally:
            watch.publish(f"{P}/game/server", "up", retain=True)
            for c in squatters:
                c.disconnect()
                c.loop_stop()
    watch.close()
    # the ids it did use: derived from its key file, which no team has
    tag = crypto.client_id_tag(crypto.load_or_create_referee_key(tmp_path / "referee.key"))
    assert f" as salvo-referee-{tag}-{prefix}-out " in broker.log()


def test_a_taken_over_connection_comes_back_and_says_up_again(
    broker: Mosquitto, start_referee: RefereeFactory, watcher: Recorder, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    ref: Referee = start_referee()
    P = f"/{prefix}"
    watcher.wait_for(f"{P}/game/server", "up")
    leaked = ref.runners[0]._client_ids["publishing connection"]  # as if it had leaked
    mark = watcher.mark()
    with caplog.at_level(logging.ERROR, "salvo.referee"):
        thief = squat_client_id(broker, leaked)
        watcher.wait_for(f"{P}/game/server", "down", after=mark)  # the broker fired the referee's will
        thief.disconnect()
        thief.loop_stop()
        # the referee takes its id back and re-asserts its presence
        watcher.wait_for(f"{P}/game/server", "up", after=mark, timeout=15)
        # judged once the other connection had time to report a drop of its own
        wait_until(lambda: "TAKEN OVER? the broker closed this referee's publishing connection" in caplog.text)


# -- 7. medium: retained spam and floods ---------------------------------------------------------


def test_retained_spam_on_inbound_topics_is_cleared(
    broker: Mosquitto, start_referee: RefereeFactory, prefix: str
) -> None:
    P = f"/{prefix}"
    ref = start_referee()
    mallory = Recorder(broker, "mallory", [])
    spam = {f"{P}/players/victim{i}/fire": f"spam {i}" * 100 for i in range(50)}
    try:
        for topic, payload in spam.items():
            assert mallory.publish(topic, payload, retain=True) < 0x80
        wait_until(lambda: ref.runners[0].dispatcher.cleared_retained >= len(spam), what="every spam message cleared")
        # a subscriber arriving now finds none of it retained
        probe = Recorder(broker, "referee", [f"{P}/players/+/fire"])
        marker = uuid.uuid4().hex
        probe.publish(f"{P}/players/marker/fire", marker)
        probe.wait(lambda m: m.text == marker)
        assert not [m for m in probe.messages if m.retain and m.payload], "spam is still retained"
        probe.close()
    finally:
        mallory.close()


def test_the_broker_refuses_packets_far_above_what_the_referee_reads(broker: Mosquitto, prefix: str) -> None:
    mallory = Recorder(broker, "mallory", [])
    try:
        gone = threading.Event()
        mallory.client.on_disconnect = lambda *_a: gone.set()
        mallory.client.publish(f"/{prefix}/players/x/fire", b"x" * 100_000, qos=1, retain=True)
        assert gone.wait(10), "mosquitto accepted a 100 KB message"
    finally:
        mallory.close()


def test_a_garbage_flood_is_summarised_in_the_log_and_the_game_goes_on(
    broker: Mosquitto,
    start_referee: RefereeFactory,
    make_team: TeamFactory,
    watcher: Recorder,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    P = f"/{prefix}"
    start_referee(turn_timeout=20)
    teams = {n: make_team(n) for n in FLEETS}
    info = to_turn_one(teams, watcher, P)
    flood = 2000
    mallory = Recorder(broker, "mallory", [])
    try:
        with caplog.at_level(logging.WARNING, "salvo.referee"):
            for i in range(flood):
                mallory.client.publish(f"{P}/players/bob/fire", f"garbage {i}", qos=1)
            wait_until(lambda: mallory.client.want_write() is False, what="the flood sent")
            # the current player still fires a whole salvo, and it counts
            shooter = info["player"]
            target = next(n for n in FLEETS if n != shooter)
            cells = all_cells(FLEETS[target])[: info["shots"]]
            mark = watcher.mark()
            t0 = time.monotonic()
            for x, y in cells:
                teams[shooter].fire(target, x, y, turn=1)
            salvo = watcher.wait(lambda m: m.topic == f"{P}/game/salvo", after=mark, timeout=60).json()
            took = time.monotonic() - t0
            assert salvo == {"turn": 1, "player": shooter, "shots": len(cells), "hits": len(cells)}
        lines = [r for r in caplog.records if "reject" in r.getMessage()]
        assert len(lines) <= REJECT_LINES, f"{len(lines)} rejection lines for a flood of {flood}"
        print(
            f"\ngarbage flood: {flood} QoS 1 messages, {len(lines)} rejection log lines;"
            f" the salvo sent right after it was resolved {took:.2f} s later"
        )
    finally:
        mallory.close()


# -- 8. attribution: nobody fills another team's error topic ---------------------------------------


def test_garbage_at_any_fire_topic_never_reaches_the_current_players_error_topic(
    broker: Mosquitto, start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    P = f"/{prefix}"
    start_referee(turn_timeout=20)
    teams = {n: make_team(n) for n in FLEETS}
    info = to_turn_one(teams, watcher, P)
    current = info["player"]
    mallory = Recorder(broker, "mallory", [])
    try:
        mark = watcher.mark()
        forged = crypto.sign(crypto.derive_team_key(current, "a guess"), {"x": 1, "y": 1})
        for payload in ("garbage", "{}", json.dumps(forged)):
            mallory.publish(f"{P}/players/{current}/fire", payload)
        wait_until(lambda: len(watcher.on(f"{P}/game/errors", after=mark)) >= 3, what="three public reports")
        assert not watcher.on(f"{P}/players/{current}/error", after=mark)
    finally:
        mallory.close()


def test_an_accepted_shot_delivered_again_gets_no_error_and_no_second_hit(
    start_referee: RefereeFactory, make_team: TeamFactory, watcher: Recorder, prefix: str
) -> None:
    """What a broker does after a referee restart: it sends unacknowledged
    messages again. In v1 the shooter then got false 'signature' errors."""
    P = f"/{prefix}"
    ref = start_referee(turn_timeout=20)
    teams = {n: make_team(n) for n in FLEETS}
    to_turn_one(teams, watcher, P)
    shooter, target, fire = captured_shot(teams, watcher, P)
    fired = ref.runners[0].arena.game.fired
    mark = watcher.mark()
    teams[shooter].conn.publish(f"{P}/players/{target}/fire", fire.payload)
    # a marker the referee answers after it: then the redelivery has been handled
    teams[shooter].conn.publish(f"{P}/players/{target}/fire", "not json")
    watcher.wait(lambda m: m.topic == f"{P}/game/errors", after=mark)
    assert not watcher.on(f"{P}/players/{shooter}/error", after=mark)
    assert not watcher.on(f"{P}/players/{target}/hit", after=mark)
    assert ref.runners[0].arena.game.fired == fired


@pytest.fixture(autouse=True)
def _no_secret_leaks(watcher: Recorder) -> Iterator[None]:
    """Whatever an attack provoked, no secret was ever echoed on any topic."""
    yield
    for m in watcher.messages:
        if not m.topic.endswith("/request_participation"):
            assert b"-secret-for-tests" not in m.payload, m


# -- a flood that overflows the referee's queue at the broker ----------------------------------


def test_a_flood_that_drops_a_teams_shots_at_the_broker_does_not_cost_it_its_turn(
    new_broker: BrokerFactory, tmp_path: Path
) -> None:
    """The review's flood: so much QoS 1 garbage on a fire topic during
    alice's turn that mosquitto's queue for the referee overflows and the
    broker drops messages, alice's acknowledged shots among them. The turn's
    clock stops while the arena is flooded, and alice's SDK sends its
    unresolved salvo again: when the flood is over, every shot counts."""
    mosq = new_broker()
    mosq.start()
    prefix = "flooded"
    P = f"/{prefix}"
    key = crypto.load_or_create_referee_key(tmp_path / "k")
    ref = Referee(
        make_arenas([prefix], Config(turn_timeout=3, max_missed_turns=1), 2, key),
        Broker.from_url(mosq.url("referee")),
        client_id="flood-ref",
    )
    ref.start()
    watch = Recorder(mosq, "referee", [f"{P}/game/#"])
    alice = SalvoClient("alice", "alice-secret-for-tests", mosq.url("alice"), prefix=prefix)
    bob = connect_team(mosq, prefix, "bob")
    stop = threading.Event()
    sent = [0]
    try:
        assert ref.wait_connected(10)
        alice.connect()
        alice.join()
        bob.join()
        watch.wait(lambda m: m.topic == f"{P}/game/state")  # (and bob's key derived:)
        wait_until(lambda: "bob" in alice.view.players, what="bob joined")
        alice.place_fleet(ROWS)
        bob.place_fleet(COLUMNS)
        # bob passes his turns (one missed turn drops a player: he fires water)
        turn = alice.wait_my_turn(timeout=20)
        while turn is None or alice.view.current != "alice":
            turn = alice.wait_my_turn(timeout=20)

        def flood() -> None:
            mallory = new_client(Broker.from_url(mosq.url("mallory")), f"flood-{uuid.uuid4().hex[:6]}")
            mallory.max_inflight_messages_set(0)  # no limit: as fast as the wire goes
            mallory.max_queued_messages_set(0)
            mallory.connect("127.0.0.1", mosq.port)
            mallory.loop_start()
            while not stop.is_set():
                mallory.publish(f"{P}/players/bob/fire", b"garbage %d" % sent[0], qos=1)
                sent[0] += 1
            mallory.disconnect()
            mallory.loop_stop()

        mark = watch.mark()
        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        wait_until(lambda: "are being dropped" in mosq.log(), timeout=30, what="the broker dropping messages")
        cells = all_cells(COLUMNS)[: turn.shots]
        alice.fire_salvo([("bob", x, y) for x, y in cells])  # into the flood: lost at the broker
        more = sent[0] + 5000
        wait_until(lambda: sent[0] >= more, what="the flood going on after the salvo")
        stop.set()
        flooder.join(30)
        salvo = watch.wait(
            lambda m: m.topic == f"{P}/game/salvo" and m.json()["player"] == "alice", after=mark, timeout=60
        ).json()
        assert salvo["shots"] == turn.shots and salvo["hits"] == turn.shots  # every shot counted
        extended = [m for m in watch.since(mark) if m.topic == f"{P}/game/deadline"]
        assert extended, "the turn's clock never stopped for the flood"
    finally:
        stop.set()
        alice.close()
        bob.conn.close()
        watch.close()
        ref.stop()
