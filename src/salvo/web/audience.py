"""The audience: what spectators are sent, and the broker client that hears it.

One read-only paho client (:class:`Feed`) reads the public topics the pages
show of every arena (:func:`subscriptions`; no others, not even public
ones) and the tournament's standings and schedule; the :class:`Hub` keeps the
latest retained payload per topic, each arena's salvos and sinks of the game
it is playing, the games' records by id, and every browser's bounded queue.
The broker retains the last salvo only: a hub started mid-game knows the
earlier ones only when its feed is given them (the director's, from its
referee's journal: ``history``).
The web routes that stream it (server-sent events) are :mod:`salvo.web.spectate`.

The feed's client runs on a thread of paho's (``salvo spectate``), or on
the loop of the referee it sits beside (``salvo tournament run``: a
:class:`~salvo.net.link.Link`, no thread of its own). The hub is where that
thread hands over to the web server's event loop: its lock and the
per-browser queues, and nothing else, are shared between them.

A slow or dead browser cannot hold anything up: the MQTT thread only appends
to bounded per-browser queues (and nudges the browser's stream), and a
browser whose queue is full is dropped (its EventSource reconnects and
starts again from a fresh snapshot).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import paho.mqtt.client as paho
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from salvo.net.link import Link, logged
from salvo.net.mqtt import Broker, connect_async, new_client, read_qos
from salvo.spec.topics import Outbound, Topics, TournamentTopics, any_arena, arena_of, arena_topics, matches

if TYPE_CHECKING:
    from salvo.net.loop import Loop

log = logging.getLogger("salvo.web.spectate")

QUEUE_SIZE = 2000  # live events a browser may lag behind before it is dropped
MAX_TOPICS = 20_000  # retained topics remembered (about 80 per 10-player arena)
MAX_BYTES = 32 * 1024 * 1024  # encoded size of everything remembered
MAX_CLIENTS = 500
MAX_RECORDS = 200  # finished games' records kept by id (each at most 64 kB)
MAX_HISTORY = 3000  # salvo and sink events kept per arena (a 10-player game has about 1,000)
MAX_ARENAS = 500  # arenas with a history
STOP_WAIT_S = 0.5  # how long a stop waits for the broker client's thread
_BAD_CREDENTIALS = (0x86, 0x87, 0x8C)  # CONNACK: bad user name or password, not authorized, bad auth method


def _shown(t: Topics) -> tuple[str, ...]:
    """What the projector page draws of an arena (``onMessage`` in
    spectate.js), public topics all; the record is also what the replay
    viewer fetches (``/record``, ``/records``). Nothing else of the public
    topics (``/game/errors``, ``hits``, ``id``, ``pubkey``, ``players/count``)
    is shown by any page, so none of it is read or sent: a flood of error
    reports would otherwise be copied to every open stream."""
    return (
        t.state,
        t.server,
        t.deadline,
        t.turn,
        t.current,
        t.salvo,
        t.winner,
        t.stats_summary,
        t.stats_player("+"),
        t.players_list,
        t.sunk("+", "+"),
        t.defeated("+"),
        t.record,
    )


def subscriptions() -> list[str]:
    """What the pages show of every arena (unprefixed and ``/<prefix>/...``)
    and the tournament's standings and schedule; never a private topic, nor
    a public one no page shows."""
    shown = _shown(Topics())
    return [*shown, *(any_arena(f) for f in shown), TournamentTopics.standings, TournamentTopics.schedule]


_SHOWN: Final = tuple(subscriptions())


def shown(topic: str) -> bool:
    """Is ``topic`` one a page shows (and so the hub keeps and forwards)?"""
    return any(matches(f, topic) for f in _SHOWN)


def record_game(payload: bytes) -> str | None:
    """The game id of a record, None when it is not one."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("game"), str) and isinstance(doc.get("salvos"), list):
        return str(doc["game"])
    return None


#: The topics the history follows, and what each is to it.
_HISTORY: Final = {Outbound.SALVO: "salvo", Outbound.STATE: "state", Outbound.SUNK: "sink"}


def _history_kind(topic: str) -> tuple[str, str | None]:
    """An arena topic's prefix, and "salvo", "sink" or "state" for the topics
    the history follows (else None)."""
    arena, route = arena_of(topic)
    return arena, _HISTORY.get(route.kind) if route is not None else None


@dataclass
class _Heard:
    """An arena's salvos and sinks of the game it is playing, as live events,
    each once (a retained one replayed by the broker may already be there,
    from a seeded history)."""

    events: list[bytes] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)

    def add(self, event: bytes) -> bool:
        if event in self.seen or len(self.events) >= MAX_HISTORY:
            return False
        self.events.append(event)
        self.seen.add(event)
        return True


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event. JSON has no raw line breaks, so one data line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _live(topic: str, text: str) -> bytes:
    """A message as the history keeps it: sent as live, whether or not it was retained."""
    return sse({"topic": topic, "payload": text, "retained": False})


def read_records(text: str) -> list[bytes]:
    """The game records in a file: one record (JSON), or every record of a
    JSON-lines file (``salvo journal export``; a line may hold its record
    under ``"record"``), in file order."""
    try:
        docs = [json.loads(text)]
    except ValueError:
        docs = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                docs.append(json.loads(line))
    found = []
    for doc in docs:
        wrapped = isinstance(doc, dict) and "salvos" not in doc
        raw = json.dumps(doc.get("record") if wrapped else doc, separators=(",", ":")).encode()
        if record_game(raw) is not None:
            found.append(raw)
    return found


def _nothing() -> None:
    pass


@dataclass(eq=False)
class Stream:
    """One browser's stream: what it has still to be sent. ``wake`` is called
    (from any thread) after each event queued for it: the stream waits on
    its own event loop, not in a thread of its own."""

    queue: queue.Queue[bytes | None]
    wake: Callable[[], None] = _nothing
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        """Never blocks: the stream sees ``closed`` at its next wake-up, and
        what it had still to send is let go now (a dropped browser's stream
        may be stuck in a write for a while: it must not hold them)."""
        self.closed.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self.queue.get_nowait()
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait(None)
        self.wake()


class Hub:
    """The latest retained payload per topic (bounded: the least recently
    updated topics go first), and every browser's queue."""

    def __init__(
        self,
        *,
        max_topics: int = MAX_TOPICS,
        max_bytes: int = MAX_BYTES,
        max_clients: int = MAX_CLIENTS,
        queue_size: int = QUEUE_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_topics, self.max_bytes, self.max_clients = max_topics, max_bytes, max_clients
        self.queue_size = queue_size
        self.clock = clock
        self._lock = threading.Lock()
        self._retained: OrderedDict[str, bytes] = OrderedDict()  # topic -> its encoded event
        self._size = 0
        self._clients: set[Stream] = set()
        self._records: OrderedDict[str, tuple[bytes, dict[str, Any]]] = OrderedDict()  # id -> record, summary
        self._history: OrderedDict[str, _Heard] = OrderedDict()  # arena -> this game's salvos and sinks
        self.broker_up = False
        self._closed = False

    def attach(self, wake: Callable[[], None] = _nothing) -> tuple[Stream, list[bytes]] | None:
        """A new stream and what it starts with (status, the history, then the snapshot);
        None when there are too many, or the hub is closed. Atomic with :meth:`message`, so the
        stream misses nothing and gets nothing twice."""
        with self._lock:
            if self._closed or len(self._clients) >= self.max_clients:
                return None
            client = Stream(queue.Queue(self.queue_size), wake)
            self._clients.add(client)
            start = self.status(reset=True)
            history = [e for heard in self._history.values() for e in heard.events]
            return client, [start, *history, *self._retained.values()]

    def status(self, *, reset: bool) -> bytes:
        return sse({"broker": "up" if self.broker_up else "down", "reset": reset, "now": self.clock()}, "status")

    def tick(self) -> bytes:
        """What an idle stream is sent now and then: the clock (and a sign of life)."""
        return sse({"now": round(self.clock(), 3)}, "clock")

    def detach(self, client: Stream) -> None:
        with self._lock:
            self._clients.discard(client)
        client.close()

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)

    def snapshot(self) -> dict[str, str]:
        """topic -> payload of what a new stream would be sent."""
        with self._lock:
            return {t: json.loads(e.split(b"data: ", 1)[1])["payload"] for t, e in self._retained.items()}

    def record(self, *, arena: str | None = None, game: str | None = None) -> bytes | None:
        """An arena's current record (prefix, "" unprefixed) or one by game id."""
        with self._lock:
            if game is not None:
                kept = self._records.get(game)
                return kept[0] if kept else None
            topics = arena_topics(arena or "")
            event = self._retained.get(topics.record) if topics is not None else None
        if event is None:
            return None
        text: str = json.loads(event.split(b"data: ", 1)[1])["payload"]
        return text.encode() if record_game(text.encode()) else None  # only a record is served as one

    def games(self) -> list[dict[str, Any]]:
        """The records kept, newest first: game id, players, winner, how it
        ended, the arena (None when unknown) and when it was kept (Unix time)."""
        with self._lock:
            return [summary for _, summary in reversed(self._records.values())]

    def keep_record(self, payload: bytes, arena: str | None = None) -> str | None:
        """Remember a record by its game id (bounded); the id, or None.
        ``arena``: where it was played (its prefix), when known."""
        game = record_game(payload)
        if game is not None:
            doc = json.loads(payload)
            summary = {k: doc.get(k) for k in ("game", "players", "winner", "termination")}
            summary.update(arena=arena, at=round(self.clock(), 3))
            with self._lock:
                self._records.pop(game, None)
                self._records[game] = (payload, summary)
                while len(self._records) > MAX_RECORDS:
                    self._records.popitem(last=False)
        return game

    def message(self, topic: str, payload: bytes, retained: bool) -> None:
        """A message from the broker: kept (retained), followed (the history)
        and sent to every stream, if a page shows its topic; else dropped
        (the feed subscribes to those alone: this also holds for a hub fed by
        hand, or a broker that delivers more)."""
        if not shown(topic):
            return
        text = payload.decode("utf-8", errors="replace")
        event = sse({"topic": topic, "payload": text, "retained": retained})
        arena, route = arena_of(topic)
        if payload and route is not None and route.kind is Outbound.RECORD:
            self.keep_record(payload, arena)
        with self._lock:
            if retained:
                self._remember(topic, event if payload else None)
            self._follow(topic, text, _live(topic, text))
            self._send(event)

    def seed(self, heard: Iterable[tuple[str, str]]) -> None:
        """``heard``: the salvos and sinks (topic, payload, in the order
        published) of the games in progress up to now, as this hub could not
        hear them (it was not running: only the last salvo is retained). They
        go ahead of what it heard itself, each once, and to the streams open
        now. Called before the broker's retained state comes (the feed's
        subscription acknowledged), so that every page counts the whole game."""
        with self._lock:
            arenas: dict[str, list[bytes]] = {}
            for topic, text in heard:
                arenas.setdefault(arena_of(topic)[0], []).append(_live(topic, text))
            for arena, events in arenas.items():
                since = self._history.pop(arena, _Heard())
                merged = _Heard()
                for event in events:
                    if merged.add(event) and event not in since.seen:
                        self._send(event)
                for event in since.events:
                    merged.add(event)
                self._history[arena] = merged
            while len(self._history) > MAX_ARENAS:
                self._history.popitem(last=False)

    def connected(self) -> None:
        """The broker is back: browsers start over, the retained state follows."""
        with self._lock:
            self.broker_up = True
            self._retained.clear()
            self._size = 0
            # What happened while away is unknown: a game may have ended and
            # another begun. Counts start again from the retained last salvo.
            self._history.clear()
            self._send(self.status(reset=True))

    def disconnected(self) -> None:
        with self._lock:
            if not self.broker_up:
                return
            self.broker_up = False
            self._send(self.status(reset=False))

    def close(self) -> None:
        """End every stream; none opens after (a browser reconnecting while
        the server stops would hold its shutdown up)."""
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, set()
        for client in clients:
            client.close()

    def _follow(self, topic: str, text: str, event: bytes) -> None:
        """Keep an arena's salvos and sinks (as live messages) until its next game."""
        arena, kind = _history_kind(topic)
        if kind is None:
            return
        if kind == "state":
            if text == "lobby":
                self._history.pop(arena, None)
            return
        if kind == "sink" and text != "true":
            return
        heard = self._history.pop(arena, None) or _Heard()
        self._history[arena] = heard  # the newest arena last: the oldest goes first
        heard.add(event)
        while len(self._history) > MAX_ARENAS:
            self._history.popitem(last=False)

    def _remember(self, topic: str, event: bytes | None) -> None:
        old = self._retained.pop(topic, None)
        if old is not None:
            self._size -= len(old)
        if event is None:  # an empty retained payload clears the topic
            return
        self._retained[topic] = event
        self._size += len(event)
        while len(self._retained) > self.max_topics or self._size > self.max_bytes:
            _, dropped = self._retained.popitem(last=False)
            self._size -= len(dropped)

    def _send(self, event: bytes) -> None:
        for client in list(self._clients):
            try:
                client.queue.put_nowait(event)
                if client.queue.qsize() == 1:  # it was empty: its stream may be waiting (else it drains anyway)
                    client.wake()
            except queue.Full:
                log.warning("dropping a spectator that fell %d events behind", self.queue_size)
                self._clients.discard(client)
                client.close()


class Feed:
    """The broker side: one read-only paho client feeding a :class:`Hub`.
    paho (or the link, on a ``loop``) reconnects by itself; every connection
    subscribes again, which replays the retained state."""

    def __init__(
        self,
        hub: Hub,
        broker: Broker,
        history: Callable[[], Iterable[tuple[str, str]]] | None = None,
        *,
        loop: Loop | None = None,
    ) -> None:
        """``history``: the salvos and sinks of the games in progress so far
        (see :meth:`Hub.seed`), asked at every connection once subscribed.
        ``loop``: run the client on that (running) loop, not a thread of paho's."""
        self.hub, self.broker, self.history, self.loop = hub, broker, history, loop
        self._link: Link | None = None
        #: connections so far (a history read for an earlier one is dropped)
        self._connections = 0
        #: on a loop, what came while the history was read (off the loop), in order
        self._held: list[paho.MQTTMessage] | None = None
        self.settled = threading.Event()  # the first connection attempt was answered
        self.stopping = False
        self.refused: str | None = None  # the credentials were refused: retrying will not help
        self.client_id = f"salvo-spectate-{secrets.token_hex(6)}"
        self.client = new_client(broker, self.client_id)
        self.client.reconnect_delay_set(min_delay=1, max_delay=5)  # a projector should catch up fast
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    def start(self) -> None:
        connect_async(self.client, self.broker)
        if self.loop is None:
            self.client.loop_start()
            return
        self._link = Link(
            self.loop, self.client, "spectate", name="projector", broker=self.broker, guard=logged("projector")
        )
        self.loop.call_soon_threadsafe(self._link.start)

    def stop(self, wait: float = STOP_WAIT_S) -> None:
        """Disconnect and stop paho's thread, waiting at most ``wait`` for it:
        a connection attempt under way (a broker that drops packets) lasts
        up to paho's connect timeout, and a stop must not (the thread is a
        daemon: it ends with the process)."""
        self.stopping = True
        if self._link is not None:
            if self.loop is not None and not self.loop.closed:
                self.loop.call_soon_threadsafe(self._link.close)  # (a link never blocks its loop)
            return
        self.client.disconnect()
        stopper = threading.Thread(target=self.client.loop_stop, name="spectate-feed-stop", daemon=True)
        stopper.start()
        stopper.join(wait)

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        if rc.is_failure:
            reason = f"broker {self.broker.url} refused the connection: {rc}"
            log.error("%s", reason)
            if rc.value in _BAD_CREDENTIALS:
                self.refused = reason
            self.settled.set()
            return
        self.refused = None
        self._connections += 1
        self._held = None
        if self._link is not None:
            self._link.up()
        log.info("connected to %s", self.broker.url)
        self.hub.connected()  # before subscribing: the replayed retained state comes after
        # Retain-as-published (MQTT 5) tells a live retained update (state to
        # keep) from a plain message. MQTT 3.1.1 cannot: see _on_message.
        if self.client.mqtt5:
            client.subscribe([(f, SubscribeOptions(qos=1, retainAsPublished=True)) for f in subscriptions()])
        else:
            client.subscribe([(f, read_qos(self.client)) for f in subscriptions()])
        self.settled.set()

    def _on_connect_fail(self, _c: paho.Client, _u: Any) -> None:
        if not self.settled.is_set():
            log.warning("cannot reach the broker at %s yet; retrying", self.broker.url)
        self.settled.set()

    def _on_disconnect(self, _c: paho.Client, _u: Any, _f: Any, rc: ReasonCode, _p: Any) -> None:
        if self.hub.broker_up and not self.stopping:
            log.warning("lost the broker (%s); reconnecting", rc)
        self.hub.disconnected()

    def _on_subscribe(self, _c: paho.Client, _u: Any, _mid: int, codes: list[ReasonCode], _p: Any) -> None:
        refused = [f for f, rc in zip(subscriptions(), codes, strict=False) if rc.is_failure]
        if refused:
            log.warning("the broker refused the subscriptions %s", ", ".join(refused))
        if self.history is None:
            return
        # Here, before the retained state (paho reads it next): what was
        # published before the subscription is all in the history, what
        # comes after arrives too, and is kept once.
        if self.loop is None:
            self.hub.seed(self._read_history())
            return
        # A journal read is no work for the loop that serves the arenas: on
        # a thread of its own, what arrives meanwhile held back until it is in.
        self._held = []
        connection, loop = self._connections, self.loop

        def read() -> None:
            heard = self._read_history()
            with contextlib.suppress(RuntimeError):  # (the loop is closed: nothing to seed)
                loop.call_soon_threadsafe(self._seeded, connection, heard)

        threading.Thread(target=read, name="spectate-history", daemon=True).start()

    def _read_history(self) -> list[tuple[str, str]]:
        assert self.history is not None
        try:
            return list(self.history())
        except Exception:  # the projector goes on with what the broker retains
            log.exception("the games' salvos so far could not be read")
            return []

    def _seeded(self, connection: int, heard: list[tuple[str, str]]) -> None:
        """On the loop: the history read for ``connection``, then what was held back."""
        if connection != self._connections:
            return  # read for an earlier connection: the hub started over since
        held, self._held = self._held or [], None
        self.hub.seed(heard)  # (merged with what was let through, if the read took too long)
        for msg in held:
            self._deliver(msg)

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        if self._held is not None:
            self._held.append(msg)
            if len(self._held) < QUEUE_SIZE:
                return
            held, self._held = self._held, None  # a read this slow: live first, the history after
            for early in held:
                self._deliver(early)
            return
        self._deliver(msg)

    def _deliver(self, msg: paho.MQTTMessage) -> None:
        # Over 3.1.1 live messages lose their retain flag: keep every message.
        retained = msg.retain or not self.client.mqtt5
        self.hub.message(msg.topic, bytes(msg.payload), retained)
