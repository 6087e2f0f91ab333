"""Several brokers in one --broker (the nodes of a cluster), failover
between them, and the arenas a referee process takes (--arenas ranges, for
sharding a league across processes)."""

from __future__ import annotations

import collections
import re
import threading
import time
from pathlib import Path

import click
import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import salvo
from salvo.cli.common import ExitCode, arena_prefixes
from salvo.net import pahofast
from salvo.net.mqtt import Broker, connect_async, new_client
from salvo.net.watch import Recorder, wait_until
from salvo.tools.localbroker import broker_url, free_port
from salvo.tools.stress import RefereeProcess

from conftest import BrokerFactory


def test_several_urls_are_the_nodes_of_one_cluster() -> None:
    b = Broker.from_url("mqtt://ref:pw@10.0.0.1:1883, mqtt://10.0.0.2:1884,mqtt://[::1]")
    assert b.endpoints == (("10.0.0.1", 1883), ("10.0.0.2", 1884), ("::1", 1883))
    assert (b.username, b.password) == ("ref", "pw")
    assert b.url == "mqtt://ref@10.0.0.1:1883,mqtt://10.0.0.2:1884,mqtt://[::1]:1883"
    assert Broker.from_url(b.url).endpoints == b.endpoints  # the log's URL reads back
    assert Broker.from_url(broker_url(b)).password == "pw"  # and the one handed to a child process
    assert Broker.from_url("mqtt://h:1").endpoints == (("h", 1),)
    # a comma starts a node only before "scheme://": a password may hold one
    odd = Broker.from_url("mqtt://ref:p,w@h:1,mqtt://g:2")
    assert (odd.password, odd.endpoints) == ("p,w", (("h", 1), ("g", 2)))
    assert Broker.from_url(broker_url(Broker.from_url("mqtt://r:a%2Cb%2F%40@h:1"))).password == "a,b/@"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("mqtt://a:1,mqtts://b:2", "share scheme"),
        ("mqtt://a:1,mqtt://b:2?protocol=3", "share scheme, path and protocol"),
        ("mqtt://u:p@a:1,mqtt://v:q@b:2", "one login"),
        ("mqtt://u:p@a:1,mqtt://u:q@b:2", "one login"),
        ("mqtt://a:1,,mqtt://b:2", "bad port"),
        (",mqtt://b:2", "empty broker URL"),
        ("mqtt://a:1,mqtt://a:1", "listed twice"),
        ("mqtt://u:s3cret@a:x,mqtt://b:2", r"bad port in broker URL 'mqtt://u:\*\*\*@a:x'"),
        ("mqtt://a:1,ftp://b", "unsupported broker URL scheme"),
    ],
)
def test_a_cluster_url_that_cannot_work_is_refused_with_its_reason(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Broker.from_url(url)


def test_arena_ranges_share_a_league_out_to_processes() -> None:
    assert arena_prefixes("", "3") == ["arena1", "arena2", "arena3"]
    assert arena_prefixes("", "2-4") == ["arena2", "arena3", "arena4"]
    assert arena_prefixes("", "1-2, finals,7-7") == ["arena1", "arena2", "finals", "arena7"]
    assert arena_prefixes("hall", None) == ["hall"]
    bad_ones = [
        ("4-2", "first to last"),
        ("0-3", "from 1 up"),
        ("1-3,arena2", "must differ"),
        ("a,,b", "empty"),
        ("0", "1 to 10000"),
        ("1-2000000", "1 to 10000"),  # a typo, not a gigabyte of names
        ("²", "invalid arena prefix"),
    ]
    for bad, why in bad_ones:
        with pytest.raises(click.BadParameter, match=why):
            arena_prefixes("", bad)


def test_a_client_fails_over_to_the_next_node(new_broker: BrokerFactory) -> None:
    """The first node is down: the next attempt goes to the second, and
    when that one goes too, the attempts go round both in turn until one
    answers (the second, back)."""
    broker = new_broker()
    broker.start()
    dead = free_port()
    cluster = Broker.from_url(f"mqtt://127.0.0.1:{dead},{broker.url('referee')}")
    client = new_client(cluster, f"failover-{dead}")
    client.reconnect_delay_set(min_delay=1, max_delay=1)
    up = threading.Event()
    tried: list[int] = []  # the port of every attempt, failed or not

    def on_connect(_c: object, _u: object, _f: object, _rc: object, _p: object) -> None:
        tried.append(client.endpoint[1])
        up.set()

    client.on_connect = on_connect
    client.on_connect_fail = lambda _c, _u: tried.append(client.endpoint[1])
    connect_async(client, cluster)
    client.loop_start()
    try:
        assert up.wait(15), "never connected to the live node"
        assert tried == [dead, broker.port]
        assert client.mqtt5  # mosquitto speaks 5: nothing to fall back from
        up.clear()
        broker.stop()  # the node goes: the client goes round both
        wait_until(lambda: len(tried) >= 4, timeout=15, what="two more attempts")
        broker.start()
        assert up.wait(15), "never came back"
        assert tried[-1] == broker.port
        assert tried == [dead, broker.port] * (len(tried) // 2), tried  # strictly in turn
    finally:
        client.disconnect()
        client.loop_stop()


def test_the_endpoint_rotates_only_on_retries() -> None:
    """The first attempt goes to the first URL; each retry to the next."""
    cluster = Broker.from_url("mqtt://127.0.0.1:1,mqtt://127.0.0.1:2,mqtt://127.0.0.1:3")
    client = new_client(cluster, "rotation")
    connect_async(client, cluster)
    tried: list[int] = []
    end = time.monotonic() + 5
    while len(tried) < 4 and time.monotonic() < end:
        with pytest.raises(ConnectionRefusedError):
            client.reconnect()
        tried.append(client.endpoint[1])
    assert tried == [1, 2, 3, 1]


def test_referee_processes_share_a_league_by_range_and_never_overlap(new_broker: BrokerFactory) -> None:
    """Two processes hold arena1-3 and arena4-5; a third asking for 3-4
    (held) is refused, touching nothing; SIGTERM brings every arena 'down'."""
    mosq = new_broker()
    mosq.start()
    league = Broker.from_url(mosq.url("referee"))
    first = RefereeProcess(league, ["arena1", "arena2", "arena3"], client_id="")
    first.args[first.args.index("--arenas") + 1] = "1-3"  # as an organiser types it
    second = RefereeProcess(league, ["arena4", "arena5"], client_id="")
    second.args[second.args.index("--arenas") + 1] = "4-5"
    watch = Recorder(league, ["/+/game/server"], label="league")
    try:
        with first, second:
            for i in range(1, 6):
                watch.wait_for(f"/arena{i}/game/server", "up")
            overlap = RefereeProcess(league, ["arena3", "arena4"], client_id="")
            overlap.args[overlap.args.index("--arenas") + 1] = "3-4"
            overlap.start()
            assert overlap.proc is not None and overlap.proc.wait(60) == ExitCode.LOCAL_FILE
            refusal = overlap.log.read_text()
            assert "arena arena3: another referee holds it" in refusal, refusal
            assert "arena arena4: another referee holds it" in refusal, refusal
            watch.sync("/league-sync/game/server")  # every message sent so far is here
            assert {watch.text(f"/arena{i}/game/server") for i in range(1, 6)} == {"up"}  # nobody said down
        for i in range(1, 6):
            watch.wait_for(f"/arena{i}/game/server", "down")
    finally:
        watch.close()


def test_the_paho_internals_failover_and_negotiation_rely_on_are_there() -> None:
    """salvo.net.mqtt.Client sets paho fields that have no public setter while a
    connection is being made (paho itself sets _protocol to step down to
    3.1): a paho release that renames them must fail here, not at a venue."""
    client = new_client(Broker.from_url("mqtt://127.0.0.1:1,mqtt://127.0.0.1:2"), "internals")
    for field in ("_host", "_port", "_protocol", "_connect_properties", "_reconnect_delay"):
        assert hasattr(client, field), field
    # what a 3.1.1 connection reads, and the fall-back sets
    assert hasattr(new_client(Broker.from_url("mqtt://127.0.0.1:1?protocol=3"), "internals-3"), "_clean_session")
    assert callable(client.on_connect) and callable(client.on_disconnect)
    # connection.py closes a silent socket as paho's keep-alive would, and
    # reads a message's acknowledgement mark; runner.py reads a topic's raw bytes
    assert callable(client._sock_close)
    # link.py makes the socket away from the loop (the blocking half of reconnect())
    assert callable(paho.Client._create_socket)
    # link.py corks a write of more than one packet: the queue paho sends from
    assert isinstance(client._out_packet, collections.deque)
    info = paho.MQTTMessageInfo(1)
    assert info._published is False
    # pahofast: the two modules that make Properties (and paho_bench's socket pair)
    import paho.mqtt._packet as paho_packet

    import salvo.net.link  # noqa: F401 (installs pahofast)

    assert vars(paho_packet)["Properties"] is pahofast.SharedTables
    assert vars(paho)["Properties"] is Properties  # (will_set checks against it)
    # SharedTables shares what paho's __init__ makes: nothing more may be made there
    assert set(vars(Properties(PacketTypes.PUBLISH))) == {"packetType", "types", "names", "properties"}  # type: ignore[no-untyped-call]
    assert hasattr(client, "_sock") and hasattr(client, "_state") and isinstance(client._out_messages, dict)
    # pahofast.WholePackets: paho's reading it overrides, its state and what it calls
    assert callable(paho.Client._packet_read) and isinstance(client, pahofast.WholePackets)
    assert set(client._in_packet) == {
        "command",
        "have_remaining",
        "remaining_count",
        "remaining_mult",
        "remaining_length",
        "packet",
        "to_process",
        "pos",
    }
    assert isinstance(client._last_bytes_received, float) and hasattr(client._msgtime_mutex, "__enter__")
    assert callable(client._handle_on_message) and callable(client._send_puback) and callable(client._easy_log)
    assert isinstance(client._manual_ack, bool) and hasattr(client._in_callback_mutex, "__enter__")
    assert client._userdata is None  # (on_message's second argument)
    assert "info" in paho.MQTTMessage.__slots__  # LeanMessage makes it when asked
    message = paho.MQTTMessage(topic=b"/\xff")
    assert message._topic == b"/\xff"


def test_every_private_paho_access_in_src_is_guarded_above() -> None:
    """Each reach into paho's privates is marked (ruff SLF001 with its
    reason, or a subclass's own field) and named in the guard above: a new
    one without a guard fails here."""
    guarded = {"_host", "_port", "_protocol", "_connect_properties", "_reconnect_delay", "_clean_session"}
    guarded |= {"_sock_close", "_published", "_topic", "_create_socket", "_out_packet"}
    guarded |= {"_packet", "_sock", "_state", "_out_messages"}
    guarded |= {"_packet_read", "_in_packet", "_msgtime_mutex", "_last_bytes_received"}
    guarded |= {"_handle_on_message", "_manual_ack", "_send_puback", "_in_callback_mutex", "_userdata", "_easy_log"}
    src = Path(salvo.__file__).parent
    used = set()
    for path in src.rglob("*.py"):
        for line in path.read_text().splitlines():
            if "paho private" in line or ("SLF001" in line and "paho" in line):
                used |= set(re.findall(r"\.(_[a-z][a-z_]*)\b", line))
    assert used and used <= guarded, used - guarded
