"""An arena's two MQTT connections, as the runner opens them: the
subscribing one (persistent session, manual acks) and the publishing one
(its last will says 'down'); what the first subscribes to once connected;
how a stale session is discarded; when a drop is judged a take-over.
:class:`~salvo.referee.runner.ArenaRunner` owns them and their state."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from paho.mqtt.subscribeoptions import SubscribeOptions

from salvo.net.link import CONNECT_TIMEOUT_S, TAKEOVER_JUDGED_AFTER_S, Link
from salvo.net.loop import Loop
from salvo.net.mqtt import Broker, Client, new_client
from salvo.spec.topics import Topics

log = logging.getLogger("salvo.referee")

#: QoS 1 messages the publishing connection has in flight at once: the
#: Receive Maximum mosquitto announces by default (max_inflight_messages),
#: which MQTT 5 forbids a client to exceed and paho does not apply by itself;
#: more wait in paho's queue, in order. (paho's default is the same number.)
MAX_INFLIGHT: Final = 20

#: A runner's two connections, as log lines name them.
CONNECTION: Final = "connection"
PUBLISHING: Final = "publishing connection"


def open_clients(broker: Broker, client_id: str, topics: Topics) -> tuple[Client, Client]:
    """The subscribing client and the publishing one (not connected yet).

    Two connections: ``client`` subscribes (persistent session, manual
    acks), ``out`` only publishes. A broker falling behind on a flood of
    QoS 0 messages to us must not stall our publishing: mosquitto 2.0 loses
    PUBACKs queued behind such a backlog (eclipse/mosquitto#3542), and every
    lost PUBACK holds one of paho's in-flight slots for good. The connection
    that only publishes never has a backlog."""
    client = new_client(broker, client_id, manual_ack=True, persistent=True, connect_timeout=CONNECT_TIMEOUT_S)
    out = new_client(broker, f"{client_id}-out", will=(topics.server, "down"), connect_timeout=CONNECT_TIMEOUT_S)
    out.max_inflight_messages_set(MAX_INFLIGHT)
    return client, out


def subscribe_arena(client: Client, topics: Topics) -> None:
    """What the subscribing connection reads, on every (re)connect."""
    # Which referee holds the arena: watched for as long as this one runs.
    client.subscribe(topics.lease, 0)
    # Its own probe, at QoS 1 like the teams' messages: the same queue at
    # the broker, the same way in (flood.LagClock).
    client.subscribe(topics.probe, 1)
    # Retain-as-published (MQTT 5): a message a team published with the
    # retain flag keeps it, live or not, so the referee can clear it (a
    # retained inbound message would be re-read at every resubscribe).
    filters = topics.inbound_filters
    if client.mqtt5:
        client.subscribe([(f, SubscribeOptions(qos=1, retainAsPublished=True)) for f in filters])
    else:
        client.subscribe([(f, 1) for f in filters])


def discard_stale_session(client: Client, session_present: bool) -> bool:
    """A stale session is being discarded: True once this connection is on
    a new persistent session (MQTT 5: the clean start of the first
    connection did it). On MQTT 3.1.1 a clean session lives only while
    connected, so the clean connection is closed at once and the next one
    starts a persistent session; a session that was resumed all the same
    (a step down from 5 to 3.1.1 asks for the old one) is closed, and a
    clean one asked for again. Nothing is subscribed or read before."""
    # (what a 3.1.1 connection asked for; guarded: test_brokers)
    if not session_present and (client.mqtt5 or not client._clean_session):  # noqa: SLF001 (paho private)
        return True
    client.next_session(clean=session_present)
    client.again_here()  # our own close: the node is fine
    client.disconnect()
    return False


def judge_takeover(
    loop: Loop,
    guard: Callable[[Callable[[], None]], Callable[[], None]],
    name: str,
    check: Callable[[], bool] | None,
    other: Link,
) -> None:
    """Did a client take this connection over? At once when the other
    connection has nothing unread (no close of its own waiting to be
    seen); else once it had TAKEOVER_JUDGED_AFTER_S to report one."""
    if check is None:
        return
    if not other.has_input():
        check()
        return
    log.info("[%s] a drop that may be a take-over: judged in %g s", name, TAKEOVER_JUDGED_AFTER_S)

    def later() -> None:
        if not check():
            log.info("[%s] not a take-over: the other connection dropped too", name)

    loop.call_later(TAKEOVER_JUDGED_AFTER_S, guard(later))
