"""A real clustered broker: three NATS nodes (JetStream, MQTT) on loopback.
The referee, the SDK and the bots run on it unchanged (MQTT 3.1.1 is
negotiated: NATS refuses 5), and a game survives losing the node the referee
is connected to, killed at turn 3."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from salvo.net.watch import Recorder
from salvo.sdk.outcomes import GameRecord
from salvo.tools.natscluster import NatsCluster
from salvo.tools.stress import RefereeProcess, errors, play_arena


@pytest.fixture
def nats_server() -> None:
    """nats-server is installed (else the test is skipped, or fails where CI requires it)."""
    if not (shutil.which("nats-server") or os.path.exists("/usr/sbin/nats-server")):
        if os.environ.get("SALVO_REQUIRE_NATS"):
            pytest.fail("nats-server is required here (SALVO_REQUIRE_NATS) but not installed")
        pytest.skip("no nats-server here (bash .ci/run installs it)")


@pytest.fixture
def cluster(nats_server: None, tmp_path: Path) -> Iterator[NatsCluster]:
    with NatsCluster(3, tmp_path / "nats") as running:
        yield running


def test_a_port_taken_before_the_cluster_binds_it_is_traded_for_another(nats_server: None, tmp_path: Path) -> None:
    """free_port() lets a port go before nats-server binds it, and another
    process (a worker of the same suite) may take it meanwhile: once, a
    node exited "address already in use" and the test errored. The cluster
    starts again on fresh ports, as the mosquitto launcher does."""
    cluster = NatsCluster(3, tmp_path / "nats")
    taken = socket.create_server(("127.0.0.1", cluster.nodes[2].mqtt))
    try:
        with cluster:
            assert cluster.nodes[2].mqtt != taken.getsockname()[1]
            assert all(cluster.running(i) for i in cluster.nodes)
    finally:
        taken.close()


def test_a_retained_message_published_on_node_1_is_delivered_on_node_3(cluster: NatsCluster) -> None:
    one = Recorder(cluster.broker(1), label="node1")
    three = Recorder(cluster.broker(3), ["/cluster-check/#"], label="node3")
    try:
        assert not one.mqtt5 and not three.mqtt5  # NATS refused MQTT 5: both fell back to 3.1.1
        assert one.publish("/cluster-check/state", "from node 1", retain=True) == 0
        # JetStream carries it between nodes: seconds, more while the default
        # suite's four workers load the two cores (a 10 s wait missed once).
        three.wait_for("/cluster-check/state", "from node 1", timeout=30)
        late = Recorder(cluster.broker(3), ["/cluster-check/#"], label="node3-late")  # retained, not live
        try:
            assert late.wait_for("/cluster-check/state", timeout=30).text == "from node 1"
        finally:
            late.close()
    finally:
        one.close()
        three.close()


def test_a_game_survives_losing_the_referees_node_at_turn_3(cluster: NatsCluster, tmp_path: Path) -> None:
    prefix = f"nats{os.urandom(2).hex()}"
    (tmp_path / "referee").mkdir()
    node1 = cluster.nodes[1]
    referee = RefereeProcess(
        cluster.broker(1, 2, 3),  # node 1 first: that is where it connects
        [prefix],
        "--turn-timeout",
        "30",  # NATS needs a few seconds to re-elect the leaders node 1 held
        "--placement-timeout",
        "60",
        "--log-level",
        "info",
        workdir=tmp_path / "referee",
    )
    bots = cluster.broker(3, 2, 1)
    watch = Recorder(cluster.broker(3), [f"/{prefix}/#"], label="node3-watch")
    killed = threading.Event()
    was_on_node1: list[bool] = []

    def kill_node1_at_turn_3() -> None:
        turn = f"/{prefix}/game/turn"
        watch.wait(lambda m: m.topic == turn and bool(m.payload) and m.json()["turn"] == 3, timeout=120)
        # The referee is on node 1 when it goes: its log names the node it connected to.
        was_on_node1.append(f"connected to 127.0.0.1:{node1.mqtt}" in referee.log.read_text())
        cluster.kill(1)
        killed.set()

    killer = threading.Thread(target=kill_node1_at_turn_3, daemon=True)
    records: dict[str, list[GameRecord]] = {}
    try:
        with referee:
            killer.start()
            play_arena(bots, prefix, 2, 7, records)
            killer.join(5)
            log = referee.log.read_text()
            assert killed.is_set(), "turn 3 never came"
            assert was_on_node1 == [True], "the referee was not on node 1 when it was killed"
            ours = {k: v for k, v in errors.items() if k.startswith(f"{prefix}/")}
            assert not ours, ours
            mine = [records.get(f"{prefix}/p{i}") for i in range(2)]
            assert all(r and len(r) == 1 for r in mine), records
            winners = {r[0].winner for r in mine if r}
            places = sorted(r[0].mine.place for r in mine if r and r[0].mine)
            assert len(winners) == 1 and places == [1, 2]
            # What the room sees on node 3 agrees: the game is over, with that winner.
            watch.wait_for(f"/{prefix}/game/state", "over", timeout=30)
            watch.wait_for(f"/{prefix}/game/winner", winners.pop(), timeout=30)
            assert watch.text(f"/{prefix}/game/server") == "up"
            _every_salvo_complete(watch, prefix)
            assert "TAKEN OVER" not in log and "crashed" not in log, log[-3000:]
    finally:
        watch.close()


def _every_salvo_complete(watch: Recorder, prefix: str) -> None:
    """Turns 1..N, each salvo with a /hit for every one of its shots: the
    failover lost no shot (a hit published twice, at least once, is allowed)."""
    salvos = {m.json()["turn"]: m.json()["shots"] for m in watch.on(f"/{prefix}/game/salvo") if m.payload}
    assert salvos and sorted(salvos) == list(range(1, max(salvos) + 1)), sorted(salvos)
    shots: dict[int, set[int]] = {}
    for m in watch.messages:
        if m.topic.startswith(f"/{prefix}/players/") and m.topic.endswith("/hit") and m.payload:
            hit = json.loads(m.payload)
            shots.setdefault(hit["turn"], set()).add(hit["shot"])
    for turn, count in salvos.items():
        assert shots.get(turn, set()) == set(range(1, count + 1)), (turn, count, shots.get(turn))
