"""The third adversarial review's attacks that go through the broker, each
against the shipped mosquitto.conf and ACL with a registered team's login
only (docs/security.md, section 14). The web server's are in
tests/test_webserver_attacks.py; the arena race in tests/test_arena.py and
tests/test_tournament_actions.py.

Run with ``-s`` to see the measured figures docs/security.md quotes."""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from salvo.net.mqtt import Broker, new_client

from conftest import RefereeFactory
from kit import COLUMNS, ROWS
from mosquitto import Mosquitto
from mqttkit import Recorder, connect_team, wait_until


def _tls_client(broker: Mosquitto, user: str, client_id: str) -> paho.Client:
    """A raw paho client of ``user``'s on the teams' TLS listener, never reconnecting."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
    client.tls_set(ca_certs=str(broker.ca_file))
    client.username_pw_set(user, broker.users[user])
    client.reconnect_delay_set(3600, 3600)  # an attacker's connection held, not a polite client
    return client


def _connect_time(broker: Mosquitto, user: str) -> float:
    """Seconds for ``user``'s SDK-style client to be connected over TLS."""
    started = time.monotonic()
    client = new_client(Broker.from_url(broker.tls_url(user)).with_ca_file(str(broker.ca_file)), f"probe-{user}")
    connected = threading.Event()
    client.on_connect = lambda *_a: connected.set()
    client.connect_async("127.0.0.1", broker.tls_port)
    client.loop_start()
    try:
        assert connected.wait(15), f"{user} could not connect"
        return time.monotonic() - started
    finally:
        client.disconnect()
        client.loop_stop()


def test_one_teams_login_cannot_hold_the_teams_listener(broker: Mosquitto) -> None:
    """The review held 999 TLS connections with one card, and ada's and
    carol's bots were refused and forfeited. A login's connection now takes
    the place of its previous one: however many the attacker opens, it
    holds one, and another team still gets in."""
    before = [_connect_time(broker, "bob") for _ in range(5)]
    attempts = int(os.environ.get("SALVO_FLOOD_CONNECTIONS", "20"))
    clients = [_tls_client(broker, "mallory", f"flood-{i}") for i in range(attempts)]
    held: dict[int, bool] = {}
    lock = threading.Lock()

    def on_connect(i: int) -> Any:
        def cb(*_a: Any) -> None:
            with lock:
                held[i] = True

        return cb

    def on_disconnect(i: int) -> Any:
        def cb(*_a: Any) -> None:
            with lock:
                held[i] = False

        return cb

    for i, c in enumerate(clients):
        c.on_connect, c.on_disconnect = on_connect(i), on_disconnect(i)
    try:
        for c in clients:
            c.connect_async("127.0.0.1", broker.tls_port)
            c.loop_start()
        during = [_connect_time(broker, "bob") for _ in range(5)]  # a real team, mid-flood
        wait_until(lambda: len(held) == attempts, 60, "every attempt answered")
        wait_until(lambda: sum(held.values()) <= 1, 30, "the flood down to one connection")
        still = sum(c.is_connected() for c in clients)
    finally:
        for c in clients:
            c.loop_stop()
            c.disconnect()
    assert still <= 1
    print(
        f"\n{attempts} TLS connections with one team's login: {still} held at the end;"
        f" another team's connect p50 {statistics.median(before) * 1000:.0f} ms before,"
        f" {statistics.median(during) * 1000:.0f} ms during the flood"
    )


def test_the_referees_listener_takes_no_team(broker: Mosquitto) -> None:
    """The referees' own TLS listener (8884: referees on other machines,
    which need two connections an arena) refuses every team's login: a
    team's flood cannot reach the referees' connections there either."""
    refused: list[int] = []
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="team-at-the-referees-door")
    client.tls_set(ca_certs=str(broker.ca_file))
    client.username_pw_set("mallory", broker.users["mallory"])
    client.on_connect = lambda _c, _u, _f, rc, _p: refused.append(rc.value)
    client.connect_async("127.0.0.1", broker.referee_tls_port)
    client.loop_start()
    try:
        wait_until(lambda: bool(refused), 15, "the CONNACK")
    finally:
        client.loop_stop()
        client.disconnect()
    assert refused[0] in (0x86, 0x87, 5, 4), refused  # bad user name or password / not authorised


def test_another_teams_junk_does_not_stop_the_clock(
    broker: Mosquitto, start_referee: RefereeFactory, prefix: str, watcher: Recorder
) -> None:
    """The review pushed a turn's deadline back a second every second with
    ~700 tiny garbage messages a second from a team not even playing there:
    the organiser's pause, handed to every team, and an absent player
    escaping the missed-turn forfeit. Only a measured delay of the teams'
    own way to the referee gives time back now: the absent player's turn
    times out on time however much junk arrives, and /game/deadline is
    never moved."""
    start_referee(turn_timeout=2, max_missed_turns=1)
    P = f"/{prefix}"
    teams = {name: connect_team(broker, prefix, name) for name in ("alice", "bob")}
    stop, sent = threading.Event(), [0]

    def junk() -> None:
        mallory = new_client(Broker.from_url(broker.url("mallory")), f"junk-{prefix}")
        mallory.connect("127.0.0.1", broker.port)
        mallory.loop_start()
        while not stop.is_set():
            mallory.publish(f"{P}/players/bob/fire", b"x", qos=0)
            sent[0] += 1
            if sent[0] % 100 == 0:
                time.sleep(0.05)  # about 2000 a second: well above the review's 700
        mallory.disconnect()
        mallory.loop_stop()

    flooder = threading.Thread(target=junk, daemon=True)
    try:
        mark = watcher.mark()
        for team in teams.values():
            team.join()
        watcher.wait_for(f"{P}/players/count", "2", after=mark)
        flooder.start()
        wait_until(lambda: sent[0] > 1000, 10, "the junk under way")
        for name, team in teams.items():
            team.place_fleet(ROWS if name == "alice" else COLUMNS)
        first = watcher.wait(lambda m: m.topic == f"{P}/game/turn" and bool(m.payload), after=mark, timeout=15)
        started, absent = time.monotonic(), first.json()["player"]
        # nobody fires: the absent player is dropped at its first missed turn
        watcher.wait(lambda m: m.topic == f"{P}/players/{absent}/defeated", after=mark, timeout=30)
        took, junk_sent = time.monotonic() - started, sent[0]
    finally:
        stop.set()
        flooder.join(10)
        for team in teams.values():
            team.conn.close()
    turn_deadlines = {d["at"] for m in watcher.on(f"{P}/game/deadline", mark) if (d := m.json()).get("phase") == "turn"}
    print(f"\njunk during an absent player's turn: {junk_sent} messages; the 2 s turn timed out after {took:.1f} s")
    assert took < 2 + 2.5, f"the turn timed out after {took:.1f} s: the junk held the clock"
    assert len(turn_deadlines) == 1, turn_deadlines  # the turn's own deadline, never pushed back
