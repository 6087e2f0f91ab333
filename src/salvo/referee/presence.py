"""An arena's arrival and departure on the broker, as states of the loop
(never a wait that would hold up the other arenas): the start-up sweep
before it says 'up' (:class:`Sweep`), and its last words when it stops
(:class:`Farewell`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Final

import paho.mqtt.client as paho

from salvo.net.link import Guard, Link, acknowledged
from salvo.net.loop import Handle, Loop
from salvo.spec.topics import Topics

log = logging.getLogger("salvo.referee")

#: Longest the start-up sweep waits for its marker to come back.
SWEEP_TIMEOUT_S: Final = 10.0


class Sweep:
    """Clears retained game topics of an arena that its engine does not
    hold: left by an earlier referee without this state file, or by a game
    whose reset never ran. The referee is the arena's single source of
    truth, and it says so before it announces itself 'up'.

    The subscribing connection subscribes to the arena's retained topics and
    publishes a marker; a broker delivers to one subscriber in order, so once
    the marker is back every retained message has arrived. ``on_over`` runs
    when it is back (or after SWEEP_TIMEOUT_S without it)."""

    def __init__(
        self, loop: Loop, topics: Topics, client: paho.Client, *, name: str, on_over: Callable[[], None], guard: Guard
    ) -> None:
        self.loop = loop
        self.topics = topics
        self.client = client
        self.name = name
        self.active = False
        #: the marker came back, or waiting for it is over
        self.over = False
        self._on_over = on_over
        self._stale: dict[str, bytes] = {}
        self._token = b""
        self._timer: Handle | None = None
        self._overdue_cb = guard(self._overdue)

    @property
    def filters(self) -> list[str]:
        return [*self.topics.retained_filters, self.topics.sweep]

    def start(self) -> None:
        self.cancel()
        self.active, self.over, self._stale = True, False, {}
        self._token = os.urandom(8).hex().encode()
        # QoS 0: these messages are only looked at. At QoS 1 each would need
        # a (manual) ack, and unacked ones hold the broker's in-flight window
        # shut for everything else.
        self.client.subscribe([(f, 0) for f in self.filters])
        self.client.publish(self.topics.sweep, self._token, qos=0)
        self._timer = self.loop.call_later(SWEEP_TIMEOUT_S, self._overdue_cb)

    def take(self, topic: str, msg: paho.MQTTMessage) -> bool:
        """In paho's on_message: True when the message was the sweep's."""
        if not self.active:
            return False
        if topic == self.topics.sweep:
            if bytes(msg.payload) == self._token:
                self.over = True
            return True
        if msg.retain and self.topics.parse_inbound(topic) is None:
            self._stale[topic] = bytes(msg.payload)
            return True
        return False

    def _overdue(self) -> None:
        self._timer = None
        if self.active and not self.over:
            log.warning("[%s] start-up sweep incomplete: no marker back from the broker", self.name)
            self.over = True
            self._on_over()

    def finish(self, out: paho.Client, keep: set[str]) -> None:
        """Unsubscribe; clear (through ``out``) what was found and is not in ``keep``."""
        self.cancel()
        self.client.unsubscribe(self.filters)
        stale = sorted(topic for topic, payload in self._stale.items() if payload and topic not in keep)
        self._stale = {}
        for topic in stale:
            out.publish(topic, "", qos=1, retain=True)
        if stale:
            log.info("[%s] cleared %d stale retained topics, e.g. %s", self.name, len(stale), stale[0])

    def cancel(self) -> None:
        """Given up (the connection went, or the arena stops): the next
        connect starts over."""
        self.active = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Farewell:
    """The last words of an arena's connections: the others DISCONNECT at
    once; ``payload`` goes retained on ``topic`` at QoS 1 through ``pub``,
    and once the broker acknowledged it (and so all published before it),
    ``pub`` disconnects too, written within ``close_s``. Without the PUBACK
    within ``wait_s``, ``pub`` is dropped without DISCONNECT: its last will
    says the same. ``on_done`` runs once every socket is closed."""

    def __init__(
        self,
        loop: Loop,
        pub: Link,
        links: tuple[Link, ...],
        *,
        name: str,
        wait_s: float,
        close_s: float,
        on_done: Callable[[], None],
        guard: Guard,
    ) -> None:
        self.loop = loop
        self.pub = pub
        self.links = links
        self.name = name
        self.wait_s = wait_s
        self.close_s = close_s
        self._on_done = on_done
        self._info: paho.MQTTMessageInfo | None = None
        self._timer: Handle | None = None
        self._unanswered_cb = guard(self._unanswered)
        self._close_overdue_cb = guard(self._close_overdue)

    def start(self, last_words: tuple[str, str] | None) -> None:
        for link in self.links:
            link.closing = True  # no more reconnecting
            if link is not self.pub:
                # Read no more (a flooded connection would keep the loop
                # from the PUBACK): what it delivered unacknowledged comes
                # again next time.
                link.close()
        if last_words is not None and self.pub.client.is_connected():
            topic, payload = last_words
            self._info = self.pub.client.publish(topic, payload, qos=1, retain=True)
            self.pub.write_now()
            self._timer = self.loop.call_later(self.wait_s, self._unanswered_cb)
        else:
            self._disconnect(by_will=False)

    def read(self) -> None:
        """After ``pub`` read: is the PUBACK there?"""
        if self._info is not None and acknowledged(self._info):
            self._info = None
            self._disconnect(by_will=False)

    def closed(self) -> None:
        """A link's socket closed."""
        if self._info is not None:
            if self.pub.is_open:
                return
            self._info = None  # ``pub`` lost while its words were on their way: its last will says them
            self._disconnect(by_will=False)
        elif not any(link.is_open for link in self.links):
            self._done()

    def _unanswered(self) -> None:
        self._timer = None
        if self._info is not None:
            log.warning("[%s] no PUBACK for 'down' in %g s: the broker's last will says it", self.name, self.wait_s)
            self._info = None
            self._disconnect(by_will=True)

    def _disconnect(self, *, by_will: bool) -> None:
        self._cancel_timer()
        if by_will:
            self.pub.abort()
        for link in self.links:
            link.close()
        if any(link.is_open for link in self.links):
            self._timer = self.loop.call_later(self.close_s, self._close_overdue_cb)
        else:
            self._done()

    def _close_overdue(self) -> None:
        self._timer = None
        for link in self.links:
            link.abort()
        self._done()

    def _done(self) -> None:
        self._cancel_timer()
        self._on_done()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
