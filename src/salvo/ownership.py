"""One referee per arena, checked through the broker (protocol v2 section 4).

Referees on different machines share nothing but the broker, so that is
where an arena's holder is written down: every referee publishes, retained
on the arena's ``/game/lease`` (the referee's own topic), a lease of its own
process, ``{"id", "since", "host"}``, and keeps it in its state file. Before
a referee touches an arena it surveys what the broker holds for it, through
a connection with a random client id and no last will (so that the survey
can take nothing over and say nothing):

* ``/game/server`` is ``up`` under another lease: a live referee holds it.
  Refuse. (A crashed holder's last will says ``down``; then it may be taken.)
  ``up`` under the lease this state file held last is this referee's own
  previous run (killed, its will not yet fired): take it back.
* The broker shows a game in progress (state ``turn`` or ``over``, or a lobby
  with players) whose ``/game/id`` is not the one this state file is playing:
  the file was emptied, replaced or deleted, or is another referee's.
  Refuse, unless the organiser asks for a fresh start (``--fresh``).

Two referees surveying at the same instant could both find the arena free;
each then watches the lease, and the earlier claim yields to the later one
(see ``ArenaRunner._check_lease``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho

from salvo.mqtt import Broker, connect_async, new_client
from salvo.protocol import Arena, Record
from salvo.store import Store
from salvo.topics import Topics

log = logging.getLogger("salvo.ownership")


@dataclass(frozen=True, slots=True)
class Lease:
    id: str
    since: float
    host: str

    @staticmethod
    def new(now: float | None = None) -> Lease:
        return Lease(os.urandom(8).hex(), round(time.time() if now is None else now, 3), socket.gethostname()[:64])

    def text(self) -> str:
        return json.dumps({"id": self.id, "since": self.since, "host": self.host}, separators=(",", ":"))

    @staticmethod
    def parse(text: str | bytes | None) -> Lease | None:
        try:
            value: Any = json.loads(text or "")
            return Lease(str(value["id"]), float(value["since"]), str(value.get("host", "")))
        except (ValueError, TypeError, KeyError):
            return None


@dataclass
class Sighting:
    """What the broker holds retained for one arena."""

    server: str | None = None
    lease: Lease | None = None
    game_id: str | None = None
    state: str | None = None
    players: list[str] = field(default_factory=list)

    @property
    def in_progress(self) -> bool:
        """A game the teams were told about: started, over but not yet reset,
        or a lobby somebody joined."""
        return self.state in ("turn", "over") or (self.state == "lobby" and bool(self.players))


def verdict(
    name: str,
    seen: Sighting,
    *,
    last_lease: Lease | None,
    game_id: str,
    has_events: bool,
    fresh: bool,
    state_file: str = "this state file",
) -> str | None:
    """Why this referee must not take arena ``name``, or None when it may.
    ``last_lease``: the lease its state file held the arena with last;
    ``game_id``: the game its state file is playing; ``has_events``: the
    state file has events of that game."""
    ours = last_lease is not None and seen.lease is not None and seen.lease.id == last_lease.id
    if seen.server == "up" and not ours:
        holder = (
            f"lease {seen.lease.id} on {seen.lease.host or '?'} since {time.ctime(seen.lease.since)}"
            if seen.lease
            else "no lease: a referee of an older version"
        )
        return (
            f"arena {name}: another referee holds it and is up ({holder}). Stop that one first, or wait until"
            " its last will says down; two referees on one arena would contradict each other"
        )
    if fresh or not seen.in_progress:
        return None
    if seen.game_id is None and has_events:
        return None  # a game of a referee from before game ids: this state file's own (an upgrade)
    if seen.game_id != game_id:
        what = "the results of a game" if seen.state == "over" else "a game in progress"
        return (
            f"arena {name}: the broker shows {what}"
            f" (game {seen.game_id or '?'}, state {seen.state},"
            f" players {seen.players}) that {state_file} does not hold (it plays game {game_id}): was the file"
            " emptied, replaced or deleted, or is it another referee's? Restore it (see docs/reliability.md), or"
            " start with --fresh to begin a new game over that one on purpose"
        )
    return None


def survey(broker: Broker, prefixes: Iterable[str], timeout: float = 30.0) -> dict[str, Sighting]:
    """Read what the broker holds retained for each arena, through a connection
    with a random client id and no will. Raises TimeoutError when the broker
    cannot be reached (or does not answer) within ``timeout``, PermissionError
    when it refuses the credentials."""
    topics = {p: Topics(p) for p in prefixes}
    sightings = {p: Sighting() for p in topics}
    readers = {}
    for p, t in topics.items():
        readers[t.server] = (p, "server")
        readers[t.lease] = (p, "lease")
        readers[t.game_id] = (p, "game_id")
        readers[t.state] = (p, "state")
        readers[t.players_list] = (p, "players")
    marker_topic = next(iter(topics.values())).sweep if topics else "/game/sweep"
    marker = os.urandom(8).hex().encode()
    done, connected = threading.Event(), threading.Event()
    refused: list[str] = []
    client = new_client(broker, f"salvo-survey-{os.urandom(6).hex()}")

    def on_connect(c: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            if rc.value in (0x86, 0x87, 0x8C):  # credentials or authorisation: retrying will not help
                refused.append(str(rc))
                done.set()
            return
        connected.set()
        c.subscribe([(topic, 0) for topic in [*readers, marker_topic]])
        # Retained messages come with the subscription; ours after them.
        c.publish(marker_topic, marker, qos=0)

    def on_message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        if msg.topic == marker_topic:
            if bytes(msg.payload) == marker:
                done.set()
            return
        where = readers.get(msg.topic)
        if where is None or not msg.retain:
            return
        seen, text = sightings[where[0]], bytes(msg.payload).decode("utf-8", "replace")
        if where[1] == "lease":
            seen.lease = Lease.parse(text)
        elif where[1] == "players":
            try:
                names = json.loads(text) if text else []
                seen.players = [str(n) for n in names] if isinstance(names, list) else []
            except ValueError:
                seen.players = []
        else:
            setattr(seen, where[1], text or None)

    client.on_connect = on_connect
    client.on_message = on_message
    connect_async(client, broker)
    client.loop_start()
    try:
        if not done.wait(timeout):
            what = "did not answer" if connected.is_set() else "cannot be reached"
            raise TimeoutError(f"the broker at {broker.url} {what}: cannot check who holds the arenas")
    finally:
        client.disconnect()
        client.loop_stop()
    if refused:
        raise PermissionError(f"broker {broker.url} refused the connection: {refused[0]}")
    return sightings


def claim(broker: Broker, arenas: list[Arena], store: Store, *, fresh: bool = False) -> list[str]:
    """Survey the arenas and, when this referee may take them all, give each
    a new lease (kept in the state file first, then published with the
    arena's presence). Why it may not, arena by arena, otherwise: then
    nothing was touched, on the broker or in the state file."""
    seen = survey(broker, [a.topics.prefix for a in arenas])
    problems, replaced = [], []

    def why(arena: Arena, fresh: bool) -> str | None:
        p = arena.topics.prefix
        return verdict(
            p or "(default)",
            seen[p],
            last_lease=Lease.parse(store.lease(p)),
            game_id=arena.game.game_id,
            has_events=bool(store.current_game(p)[1]),
            fresh=fresh,
            state_file=f"the state file {store.path}",
        )

    for arena in arenas:
        if problem := why(arena, fresh):
            problems.append(problem)
        elif fresh and why(arena, False):
            replaced.append(arena)
    if problems:
        return problems
    for arena in replaced:
        # --fresh over a game the broker shows and the journal does not hold:
        # whatever game the journal does hold (from a damaged file) is
        # abandoned too, so the arena opens an empty lobby (the start-up
        # sweep clears the broker's stale topics).
        records = [e for e in arena.abandon("salvo referee --fresh", time.time()) if isinstance(e, Record)]
        store.record_many([(arena.topics.prefix, r.game_no, r.event) for r in records])
        log.warning(
            "arena %s: --fresh: a new game %s replaces game %s",
            arena.topics.prefix or "(default)",
            arena.game.game_id,
            seen[arena.topics.prefix].game_id,
        )
    for arena in arenas:
        lease = Lease.new().text()
        store.set_lease(arena.topics.prefix, lease)
        arena.lease = lease
    store.settle()
    store.checkpoint()  # arenas and leases into the file itself: a lost -wal keeps them
    return []
