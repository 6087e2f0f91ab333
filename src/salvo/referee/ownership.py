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
  ``up`` under the lease this state file held last, taken with this very
  file (the lease's ``run``: a copy of the file carries the lease, not the
  file), is this referee's own previous run (killed, its will not yet
  fired): take it back.
* The broker shows a game of one of this state file's own games (the one it
  plays, or an earlier one whose reset the backlog still has to publish):
  this referee's own; it carries on. Unless the broker shows more of it
  than the file holds (a later turn or state, a sunk ship or defeat: a
  restored backup, an earlier copy), or a *later* game of the file's id
  key: the journal is written before anything is published, so that file
  is behind what the teams were told. Refuse, saying how far (``--fresh``
  ends that game on purpose; never for a later game, whose numbers and ids
  the teams already signed for).
* The broker shows a finished game (state ``over``) of another state file,
  and its referee is down (its will said so): the evening moved on (another
  night, free play after a tournament, a tournament after free play). Take
  it: the start-up sweep clears that game and opens a lobby. No flag.
* The broker shows a game in progress (state ``turn``, or a lobby with
  players) of another state file, its referee down: the file was emptied,
  replaced or deleted, or is another referee's. Refuse, unless the
  organiser asks for a fresh start (``--fresh``). One exception: a
  tournament director takes over a *free-play* game (the lease says which
  kind of referee held it): switching the evening to the tournament is
  that choice, and free play's games are casual.

Two referees surveying at the same instant could both find the arena free;
each then watches the lease, and the earlier claim yields to the later one
(see ``batch.Dispatcher._check_lease``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from salvo.arena.arena import Arena, Record
from salvo.arena.journal import Store
from salvo.game.identity import game_id_for
from salvo.net.mqtt import Broker, Client, read_retained
from salvo.spec.topics import Outbound, Topics, arena_of

log = logging.getLogger("salvo.referee.ownership")


#: The kinds of referee a lease names (``role``): free play's games are
#: casual, a tournament director may end them (see the module docstring).
FREE_PLAY, TOURNAMENT = "free-play", "tournament"


@dataclass(frozen=True, slots=True)
class Lease:
    id: str
    since: float
    host: str
    #: FREE_PLAY, TOURNAMENT, or "" (a referee that did not say: older ones, tools)
    role: str = ""
    #: the arena's lease generation: one more than the newest its holder saw
    #: when it took the arena (0: a referee of an older version). It only
    #: grows, whatever the machines' clocks say: the fencing token.
    gen: int = 0
    #: the state file it was taken with (:attr:`Store.run_identity`): a copy
    #: of the file carries the lease but not this ("": an older version)
    run: str = ""

    @staticmethod
    def new(now: float | None = None, role: str = "", gen: int = 0, run: str = "") -> Lease:
        since = round(time.time() if now is None else now, 3)
        return Lease(os.urandom(8).hex(), since, socket.gethostname()[:64], role, gen, run)

    def text(self) -> str:
        body: dict[str, object] = {"id": self.id, "since": self.since, "host": self.host}
        if self.role:
            body["role"] = self.role
        if self.gen:
            body["gen"] = self.gen
        if self.run:
            body["run"] = self.run
        return json.dumps(body, separators=(",", ":"))

    def newer_than(self, other: Lease) -> bool:
        """The later claim of the two: the higher generation; at the same
        one (two referees claiming at once), the later start, then the id."""
        return (self.gen, self.since, self.id) > (other.gen, other.since, other.id)

    @staticmethod
    def parse(text: str | bytes | None) -> Lease | None:
        try:
            value: Any = json.loads(text or "")
            role, gen, run = str(value.get("role", "")), int(value.get("gen", 0)), str(value.get("run", ""))
            return Lease(str(value["id"]), float(value["since"]), str(value.get("host", "")), role, gen, run)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


class Fence:
    """Which leases the broker showed this referee's subscriber since it
    (re)connected; and the check a referee that lost the broker makes before
    it publishes again (``ArenaRunner._on_out_disconnect``): the retained
    lease asked for again, then a marker of its own, which comes back after
    every lease the broker holds or took meanwhile."""

    def __init__(self, arena: Arena, client: Client) -> None:
        self._arena = arena
        self._client = client
        #: the leases the broker showed since the subscriber (re)connected, in order
        self._seen: list[bytes] = []
        #: the marker of a check under way (the publishing connection held)
        self._token: bytes | None = None

    def reset(self) -> None:
        """The subscriber (re)connected: a check under way is the sweep's now."""
        self._seen.clear()
        self._token = None

    def saw(self, payload: bytes) -> None:
        self._seen.append(payload)

    def check(self) -> None:
        self._seen.clear()
        self._token = os.urandom(8).hex().encode()
        t = self._arena.topics
        self._client.subscribe([(t.lease, 0), (t.sweep, 0)])  # the retained lease again, then:
        self._client.publish(t.sweep, self._token, qos=0)

    def returned(self, payload: bytes) -> bool:
        """A message on the sweep topic: True when it is the check's marker
        (the check is over: see rival)."""
        if self._token is None or payload != self._token:
            return False
        self._token = None
        self._client.unsubscribe(self._arena.topics.sweep)
        return True

    def rival(self) -> bool:
        """A lease newer than this referee's among those the broker showed
        since the subscriber connected: the arena was taken meanwhile."""
        mine = Lease.parse(self._arena.lease)
        seen = [lease for lease in map(Lease.parse, self._seen) if lease is not None]
        return mine is not None and any(other.id != mine.id and other.newer_than(mine) for other in seen)


@dataclass
class Sighting:
    """What the broker holds retained for one arena."""

    server: str | None = None
    lease: Lease | None = None
    game_id: str | None = None
    state: str | None = None
    players: list[str] = field(default_factory=list)
    #: the turn ``/game/turn`` names (0: none)
    turn: int = 0
    #: the retained sunk and defeated topics that say ``true``
    fallen: set[str] = field(default_factory=set)

    @property
    def in_progress(self) -> bool:
        """A game the teams were told about: started, over but not yet reset,
        or a lobby somebody joined."""
        return self.state in ("turn", "over") or (self.state == "lobby" and bool(self.players))


#: How far past its own game a state file looks for the broker's game among
#: its later ones (a restored backup): ids are cheap (about 1 us each).
LATER_GAMES: Final = 10_000
#: The order of a game's states.
_STAGES: Final = {"lobby": 0, "turn": 1, "over": 2}


@dataclass(frozen=True)
class Progress:
    """How far a state file's game went: what it entitles the broker to show.
    Each only grows within a game."""

    state: str
    turn: int
    fallen: frozenset[str]
    players: frozenset[str] = frozenset()

    @staticmethod
    def of(arena: Arena) -> Progress:
        game, t = arena.game, arena.topics
        fallen = {
            topic
            for topic, payload in game.retained.items()
            if payload == "true" and (r := t.parse_outbound(topic)) is not None and r.kind in _FALLEN
        }
        return Progress(game.phase.value, game.turn, frozenset(fallen), frozenset(game.players))

    def describe(self) -> str:
        return f"turn {self.turn}" if self.turn else f"state {self.state}"


_FALLEN: Final = (Outbound.SUNK, Outbound.DEFEATED)


def _owner(topic: str) -> str:
    """The player a ``.../players/<name>/...`` topic is about."""
    route = arena_of(topic)[1]
    return route.name if route is not None else ""


def lag(seen: Sighting, progress: Progress) -> str | None:
    """How the broker shows more of a state file's own game than the file
    holds (a restored backup, a copy of the file taken earlier), or None.
    The journal is written before anything is published, so the broker can
    never rightly be ahead of it."""
    shown = f"turn {seen.turn}" if seen.turn else f"state {seen.state}"
    state = seen.state or ""
    if state == "over" and progress.state == "lobby" and not seen.turn:
        # A reset cut short: it publishes its clears, then the new game's id,
        # then "lobby" (engine._reset), so the "over" is the game before's.
        # This game's own "over" would come with its /game/turn: every game
        # ends by a salvo, and /game/turn stays until the reset clears it.
        state = "lobby"
    if _STAGES.get(state, 0) > _STAGES.get(progress.state, 0) or seen.turn > progress.turn:
        return f"the broker shows {shown}, this journal ends at {progress.describe()}"
    # (A sink of somebody who is not a player of the journal's game is not
    # this game's: stale, from before the start-up sweep that clears it.)
    if missing := {f for f in seen.fallen - progress.fallen if _owner(f) in progress.players}:
        first = sorted(missing)[0]
        return f"the broker shows {len(missing)} sunk ship(s) or defeat(s) this journal does not hold ({first} ...)"
    # (Not the lobby's players: a journaled removal may not be published yet.)
    return None


def verdict(
    name: str,
    seen: Sighting,
    *,
    last_lease: Lease | None,
    game_id: str,
    has_events: bool,
    fresh: bool,
    earlier_ids: Collection[str] = (),
    role: str = "",
    state_file: str = "this state file",
    run: str = "",
    behind: str | None = None,
    later_game: int = 0,
) -> str | None:
    """Why this referee must not take arena ``name``, or None when it may.
    ``last_lease``: the lease its state file held the arena with last;
    ``game_id``: the game its state file is playing; ``has_events``: the
    state file has events of that game; ``earlier_ids``: the ids of its
    earlier games of this arena; ``role``: what this referee is (FREE_PLAY,
    TOURNAMENT or ""); ``run``: the state file's :attr:`Store.run_identity`;
    ``behind``: how the broker shows more of its game than it holds
    (:func:`lag`); ``later_game``: how many games past its own the game the
    broker shows is (a later game of this very file: it is an older copy)."""
    ours = (
        last_lease is not None
        and seen.lease is not None
        and seen.lease.id == last_lease.id
        # a copy of the state file carries its lease, not the file it was taken with
        and (not seen.lease.run or seen.lease.run == run)
    )
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
    restore = 'Start it from the newest state file (the live one, or the latest backup: docs/reliability.md, "Backups")'
    if later_game:
        # Even --fresh would begin game numbers, and their ids, that the
        # teams were already given: signed shots of those games would count.
        return (
            f"arena {name}: the broker shows game {seen.game_id} ({seen.state}), {later_game} game(s) after the one"
            f" {state_file} ends with (it plays game {game_id}): the file is older than what the teams were told (a"
            " restored backup, or a copy?). " + restore + ", or with a new state file (another --state; --fresh then"
            " ends that game on purpose)"
        )
    if behind is not None and not fresh:
        return (
            f"arena {name}, game {game_id}: {behind}: {state_file} is behind what the teams were told (a restored"
            " backup, or a copy taken earlier?), and resuming it would take back published results. "
            + restore
            + ". To end that game and begin a new one on purpose: --fresh (SALVO_FRESH=1)"
        )
    if fresh or not seen.in_progress:
        return None
    if seen.game_id is None and has_events:
        return None  # a game of a referee from before game ids: this state file's own (an upgrade)
    if seen.game_id == game_id or seen.game_id in earlier_ids:
        return None  # its own (an earlier game: the backlog publishes what came after)
    if seen.state == "over":
        return None  # finished, and its referee is down (an "up" one was refused above)
    if role == TOURNAMENT and seen.lease is not None and seen.lease.role == FREE_PLAY:
        return None  # the evening switched from free play to the tournament
    if seen.game_id != game_id:
        other = seen.lease.role if seen.lease is not None and seen.lease.role else ""
        held = f" by a {other} referee" if other else ""
        why = (
            f"the evening was switched from the {other} mode in the middle of that game"
            if other and role and other != role
            else "was the file emptied, replaced or deleted, or is it another referee's? Restore it (see"
            " docs/reliability.md)"
        )
        return (
            f"arena {name}: the broker shows a game in progress{held}"
            f" (game {seen.game_id or '?'}, state {seen.state},"
            f" players {seen.players}) that {state_file} does not hold (it plays game {game_id}): {why}."
            " To end that game and begin a new one on purpose: --fresh (SALVO_FRESH=1)"
        )
    return None


def survey(broker: Broker, prefixes: Iterable[str], timeout: float = 30.0) -> dict[str, Sighting]:
    """Read what the broker holds retained for each arena, through a connection
    with a random client id and no will. Raises TimeoutError when the broker
    cannot be reached (or does not answer) within ``timeout``, PermissionError
    when it refuses the credentials."""
    topics = {p: Topics(p) for p in prefixes}
    readers = {}
    for p, t in topics.items():
        readers[t.server] = (p, "server")
        readers[t.lease] = (p, "lease")
        readers[t.game_id] = (p, "game_id")
        readers[t.state] = (p, "state")
        readers[t.players_list] = (p, "players")
        readers[t.turn] = (p, "turn")
    fallen = [f for t in topics.values() for f in (t.sunk("+", "+"), t.defeated("+"))]
    marker_topic = next(iter(topics.values())).sweep if topics else Topics().sweep
    try:
        found = read_retained(broker, [*readers, *fallen], marker_topic, timeout=timeout)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: cannot check who holds the arenas") from None
    sightings = {p: Sighting() for p in topics}
    for topic, payload in found.items():
        text = payload.decode("utf-8", "replace")
        if topic not in readers:  # a sunk ship or a defeat
            if text == "true":
                for p, t in topics.items():
                    if (r := t.parse_outbound(topic)) is not None and r.kind in _FALLEN:
                        sightings[p].fallen.add(topic)
            continue
        p, what = readers[topic]
        seen = sightings[p]
        if what == "lease":
            seen.lease = Lease.parse(text)
        elif what == "players":
            try:
                names = json.loads(text)
                seen.players = [str(n) for n in names] if isinstance(names, list) else []
            except ValueError:
                seen.players = []
        elif what == "turn":
            try:
                number = json.loads(text).get("turn", 0)
                seen.turn = number if isinstance(number, int) and number > 0 else 0
            except (ValueError, AttributeError):
                seen.turn = 0
        else:
            setattr(seen, what, text)
    return sightings


def claim(broker: Broker, arenas: list[Arena], store: Store, *, fresh: bool = False, role: str = "") -> list[str]:
    """Survey the arenas and, when this referee may take them all, give each
    a new lease naming ``role`` (kept in the state file first, then
    published with the arena's presence). Why it may not, arena by arena,
    otherwise: then nothing was touched, on the broker or in the state file."""
    seen = survey(broker, [a.topics.prefix for a in arenas])
    problems, replaced = [], []
    for arena in arenas:
        p = arena.topics.prefix
        has_events = bool(store.current_game(p)[1])
        earlier = {game_id_for(arena.game.id_key, n) for n, _ in store.games(p) if n != arena.game.game_no}
        there = seen[p]
        behind = lag(there, Progress.of(arena)) if there.game_id == arena.game.game_id else None
        later = _later_game(arena, there.game_id)
        if problem := verdict(
            p or "(default)",
            seen[p],
            last_lease=Lease.parse(store.lease(p)),
            game_id=arena.game.game_id,
            has_events=has_events,
            fresh=fresh,
            earlier_ids=earlier,
            role=role,
            state_file=f"the state file {store.path}",
            run=store.run_identity,
            behind=behind,
            later_game=later,
        ):
            problems.append(problem)
            continue
        own = {arena.game.game_id, *earlier}
        if (
            (there.game_id is not None and there.game_id not in own)
            or (there.in_progress and not has_events)
            or behind is not None  # --fresh over a journal behind the broker: never resumed under its results
        ):
            # Another referee's game is (or was last) on the broker, in any
            # state: the arena moved on since this journal's game, which is
            # abandoned rather than resumed over it (free play coming back
            # after a tournament resumed its game of hours before).
            replaced.append(arena)
    if problems:
        return problems
    for arena in replaced:
        # A game the broker shows and the journal does not hold, which this
        # referee may take (finished, free play ended by the tournament, or
        # --fresh): whatever game the journal holds (an older one, from before
        # the arena moved on, or from a damaged file) is abandoned too, so the
        # arena opens an empty lobby, and the start-up sweep clears the broker's
        # topics of the game it replaces.
        there = seen[arena.topics.prefix]
        kind = there.lease.role if there.lease is not None and there.lease.role else "stopped"
        why = (
            "--fresh" if fresh and there.in_progress and there.state != "over" else f"taken over from a {kind} referee"
        )
        records = [e for e in arena.abandon(f"salvo referee: {why}", time.time()) if isinstance(e, Record)]
        if records:
            last = store.record_many([(arena.topics.prefix, r.game_no, r.event) for r in records])
            # Nothing of the game it replaces is published (the sweep clears
            # its topics): a later restart must not publish its backlog either.
            store.mark_published(arena.topics.prefix, last)
        arena.backlog, arena.backlog_to, arena.replaced = [], 0, True
        log.warning(
            "arena %s: %s: a new game %s replaces game %s (%s)",
            arena.topics.prefix or "(default)",
            why,
            arena.game.game_id,
            there.game_id,
            there.state,
        )
    for arena in arenas:
        p = arena.topics.prefix
        known = [lease for lease in (seen[p].lease, Lease.parse(store.lease(p))) if lease is not None]
        gen = max((lease.gen for lease in known), default=0) + 1
        lease = Lease.new(role=role, gen=gen, run=store.run_identity).text()
        store.set_lease(p, lease)
        arena.lease = lease
    store.settle()
    store.checkpoint()  # arenas and leases into the file itself: a lost -wal keeps them
    return []


def _later_game(arena: Arena, game_id: str | None) -> int:
    """How many games after the arena's current one ``game_id`` is, among
    the next :data:`LATER_GAMES` of its id key; 0: none of them."""
    if game_id is None or game_id == arena.game.game_id:
        return 0
    key, now = arena.game.id_key, arena.game.game_no
    return next((n for n in range(1, LATER_GAMES + 1) if game_id_for(key, now + n) == game_id), 0)
