"""salvo.net.watch.Recorder on the real broker: what each ``keep`` mode keeps,
positions that mean the same in every mode, sync(), and a recorder on a loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from salvo.net.loop import Loop
from salvo.net.mqtt import Broker
from salvo.net.watch import Keep, Msg, NoReply, Recorder

from conftest import BrokerFactory
from mosquitto import Mosquitto
from mqttkit import Recorder as UserRecorder


@pytest.fixture
def sender(broker: Mosquitto) -> Iterator[UserRecorder]:
    rec = UserRecorder(broker, "referee", [])
    yield rec
    rec.close()


def recorder(broker: Mosquitto, prefix: str, keep: Keep) -> UserRecorder:
    return UserRecorder(broker, "referee", [f"/{prefix}/#"], keep=keep)


def send(sender: UserRecorder, rec: Recorder, prefix: str, topics: str) -> None:
    """One message per letter of ``topics`` (on /prefix/<letter>), numbered
    by position; then every one has arrived."""
    for i, topic in enumerate(topics):
        sender.publish(f"/{prefix}/{topic}", str(i))
    rec.sync(f"/{prefix}/sync")


def seen(rec: Recorder, prefix: str, after: int = 0) -> list[str]:
    n = len(prefix) + 2
    return [f"{m.topic[n:]}{m.text}" for m in rec.since(after) if not m.topic.endswith("/sync")]


def test_keep_all_keeps_every_message_at_its_position(broker: Mosquitto, sender: UserRecorder, prefix: str) -> None:
    rec = recorder(broker, prefix, "all")
    try:
        send(sender, rec, prefix, "abaca")
        assert seen(rec, prefix) == ["a0", "b1", "a2", "c3", "a4"]
        assert rec.messages[3].text == "3" and rec.mark() == 6  # the marker is the sixth
        assert seen(rec, prefix, after=2) == ["a2", "c3", "a4"]
        assert [m.text for m in rec.on(f"/{prefix}/a", after=1)] == ["2", "4"]
    finally:
        rec.close()


def test_keep_latest_keeps_one_message_a_topic_however_many_came(
    broker: Mosquitto, sender: UserRecorder, prefix: str
) -> None:
    rec = recorder(broker, prefix, "latest")
    try:
        send(sender, rec, prefix, "abaca" * 40)
        assert rec.mark() == 201  # positions count every message received
        assert seen(rec, prefix) == ["b196", "c198", "a199"]  # oldest first
        assert len(rec.messages) == 4  # and the marker's topic
        assert seen(rec, prefix, after=197) == ["c198", "a199"]
        assert rec.text(f"/{prefix}/b") == "196"
        assert rec.wait(lambda m: m.text == "199").topic == f"/{prefix}/a"
        with pytest.raises(NoReply):  # replaced: not found any more
            rec.wait(lambda m: m.text == "0", timeout=0.1)
    finally:
        rec.close()


def test_keep_n_is_a_ring_of_the_latest_n(broker: Mosquitto, sender: UserRecorder, prefix: str) -> None:
    rec = recorder(broker, prefix, 4)
    try:
        send(sender, rec, prefix, "abcdef")
        assert rec.mark() == 7
        assert seen(rec, prefix) == ["d3", "e4", "f5"]  # and the marker: four in all
        assert len(rec.messages) == 4
        assert seen(rec, prefix, after=4) == ["e4", "f5"]
        assert rec.text(f"/{prefix}/a") == "0"  # latest() still knows every topic
        with pytest.raises(NoReply):
            rec.wait(lambda m: m.text == "2", timeout=0.1)
    finally:
        rec.close()


@pytest.mark.parametrize("keep", [0, -3, True, "some"])
def test_keep_must_be_all_latest_or_a_positive_count(keep: object) -> None:
    with pytest.raises(ValueError, match="keep must be"):  # before it connects anywhere
        Recorder(Broker(host="127.0.0.1", port=9), keep=keep)  # type: ignore[arg-type]  # wrong on purpose


def test_sync_waits_for_what_others_sent_before(broker: Mosquitto, sender: UserRecorder, prefix: str) -> None:
    rec = recorder(broker, prefix, "all")
    try:
        for i in range(200):  # QoS 0: no PUBACK tells the sender they arrived
            sender.publish(f"/{prefix}/burst", str(i), qos=0)
        # (the sender's own PUBACK for a QoS 1 message after them: the broker took them all)
        sender.publish(f"/{prefix}/last", "")
        rec.sync(f"/{prefix}/sync")
        assert [m.text for m in rec.on(f"/{prefix}/burst")] == [str(i) for i in range(200)]
    finally:
        rec.close()


def test_acknowledgements_nobody_waits_for_are_not_kept(sender: UserRecorder, prefix: str) -> None:
    """Without a loop, send() and QoS 0 kept every PUBACK (paho's word, for
    QoS 0) in ``acks`` for ever: a leak, and, mids being reused, a stale
    answer for a later publish() of the same mid. Only a waiting publish()'s
    is kept, until it takes it."""
    for i in range(50):
        sender.send(f"/{prefix}/sent", str(i))
        sender.publish(f"/{prefix}/quick", str(i), qos=0)
    assert sender.flush(10)
    # The broker acknowledges in order: once this one's PUBACK is in, every earlier one is.
    sender.publish(f"/{prefix}/last", "")  # (0x10: nobody subscribes)
    assert sender.acks == {}


def test_a_retained_topic_cleared_while_away_is_forgotten_after_the_resync(broker: Mosquitto, prefix: str) -> None:
    """A deletion leaves no message: a recorder that was away (a broker
    restart) must not keep the old value for ever. The director lost an
    arena for the night that way: a lobby's list cleared during a broker
    restart stayed "occupied" in its view (tests/test_tournament_faults.py)."""
    url = Broker.from_url(broker.url("referee"))
    other = Recorder(url, [])
    rec = Recorder(url, [f"/{prefix}/#"], keep="latest")
    try:
        for topic in ("kept", "cleared"):
            other.publish(f"/{prefix}/{topic}", "1", retain=True)
        rec.wait(lambda m: m.topic == f"/{prefix}/cleared", timeout=10)
        # Away: not subscribed (as over a broker restart), while it is cleared.
        unsubscribed = threading.Event()
        rec.client.on_unsubscribe = lambda *_a: unsubscribed.set()
        rec.client.unsubscribe(f"/{prefix}/#")
        assert unsubscribed.wait(10)
        other.publish(f"/{prefix}/cleared", "", retain=True)
        assert rec.connects == 1
        rec._on_connect(rec.client, None, None, ReasonCode(PacketTypes.CONNACK, "Success"), None)  # back
        assert rec.connects == 2
        since = rec.connected_at
        rec.wait(lambda m: m.topic == f"/{prefix}/kept", after=since, timeout=10)  # subscribed again
        other.publish(f"/{prefix}/marker", "m")  # after the retained ones
        rec.wait(lambda m: m.topic == f"/{prefix}/marker", after=since, timeout=10)
        assert rec.latest(f"/{prefix}/cleared") is not None  # (the stale value, until the resync)
        assert rec.forget_before(since) == [f"/{prefix}/cleared"]
        assert rec.latest(f"/{prefix}/cleared") is None and rec.latest(f"/{prefix}/kept") is not None
    finally:
        rec.close()
        other.close()


def _paho_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("paho-mqtt-client")]


def test_a_recorder_on_a_loop_has_no_thread_and_comes_back_after_a_broker_restart(new_broker: BrokerFactory) -> None:
    """``salvo tournament run`` watches its arenas on the referee's loop: no
    paho thread; publishes handed over and acknowledged; a broker restart
    reconnects it (the link's back-off) and it subscribes again."""
    mosq = new_broker()
    mosq.start()
    loop = Loop()
    thread = threading.Thread(target=loop.run, name="test-loop", daemon=True)
    thread.start()
    before = _paho_threads()
    rec = Recorder(Broker.from_url(mosq.url("referee")), ["/w/#"], keep="latest", loop=loop)
    try:
        assert _paho_threads() == before and rec.loop is loop
        assert rec.publish("/w/a", "1", retain=True) == 0
        rec.wait_for("/w/a", "1")
        mosq.restart()
        assert rec.wait_until(lambda: rec.connects == 2, 30), "no reconnect after the restart"
        since = rec.connected_at
        rec.wait(lambda m: m.topic == "/w/a", after=since)  # subscribed again: the retained state replayed
        assert rec.publish("/w/b", "2") == 0
        rec.wait_for("/w/b", "2", after=since)
        assert _paho_threads() == before
    finally:
        rec.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_failing_callback_of_a_recorder_on_the_shared_loop_is_dropped_not_the_loop(
    new_broker: BrokerFactory,
) -> None:
    """The director's watcher shares the referee's loop: a bug in its
    callback must not reach the loop's owner (the referee's stops every
    arena on what reaches it)."""
    mosq = new_broker()
    mosq.start()
    reached: list[Exception] = []
    loop = Loop(on_error=reached.append)
    thread = threading.Thread(target=loop.run, name="test-loop", daemon=True)
    thread.start()
    rec = Recorder(Broker.from_url(mosq.url("referee")), ["/w/#"], loop=loop)
    failed: list[bool] = []

    def bug(_m: Msg) -> None:
        if not failed:
            failed.append(True)
            raise RuntimeError("a bug in the watcher's callback")

    rec.on_change = bug
    try:
        assert rec.publish("/w/a", "1") == 0
        assert rec.wait_until(lambda: bool(failed), 10), "the failing callback never ran"
        assert rec.publish("/w/b", "2") == 0
        rec.wait_for("/w/b", "2")  # the recorder went on
        assert reached == []
    finally:
        rec.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
