"""The director's loop: assign fixtures to arenas, follow each arena's game,
record results, publish the standings.

One thread runs it, waking at every message from the arenas it watches (and
twice a second): each arena is a small state machine read from its public
topics (empty lobby -> assigned -> playing -> recorded -> empty lobby), so no
arena waits for another and a stop is taken at once. Controls from the
console or the CLI are queued to this thread and applied between steps.

What a stop (SIGTERM/SIGINT) does: nothing that sends a team home. The loop
ends, the state is saved, assignments stay as they are; a restart with the
same files adopts the games in progress from the referee's journal (and the
results of games that ended while it was away).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from salvo.net.mqtt import Broker
from salvo.net.watch import Recorder
from salvo.organiser.tournament import games
from salvo.organiser.tournament.controls import ControlError
from salvo.organiser.tournament.scoring import GameResult, Row
from salvo.organiser.tournament.state import Live, State
from salvo.spec.codec import dumps
from salvo.spec.topics import Topics, TournamentTopics

if TYPE_CHECKING:
    from salvo.arena.journal import Store
    from salvo.net.loop import Loop

log = logging.getLogger("salvo.organiser.tournament")

REGISTRY_CHECK_S = 2.0
#: How often an arena's intruders are sent away at most (_send_intruders_away).
INTRUDERS_EVERY_S = 10.0
#: The loop comes round at least twice a second; this long without, it is
#: stuck (what /health reports).
LOOP_STALE_S = 10.0


class ArenaOps(Protocol):
    """What the director asks of the referee of its arenas
    (salvo.referee.service.Referee), all of it: each control answers False
    when the referee did not apply it in time."""

    def close_lobby(self, prefix: str, reason: str) -> bool: ...

    def pause_game(self, prefix: str, reason: str) -> bool: ...

    def resume_game(self, prefix: str) -> bool: ...

    def extend(self, prefix: str, seconds: float) -> bool: ...

    def abort_game(self, prefix: str, reason: str) -> bool: ...

    def seat(self, prefix: str, players: int) -> bool:
        """The arena's game starts when ``players`` are ready (tables of 3-4)."""
        ...

    def arenas_up(self) -> dict[str, bool]:
        """Each arena: connected to the broker and serving."""
        ...

    def any_stopped(self) -> bool:
        """An arena stopped on its own (its journal cannot be written, a bug):
        the night cannot go on without the organiser."""
        ...


class Director:
    def __init__(
        self,
        *,
        broker: Broker,
        arenas: list[str],
        state: State,
        state_path: Path,
        roster: dict[str, set[str]],
        referee: ArenaOps | None = None,
        store: Store | None = None,
        no_show_after: float | None = None,
        registered: Callable[[], list[str]] = list,
        loop: Loop | None = None,
    ) -> None:
        """``loop``: the running loop of the referee of the arenas, which
        then carries the director's broker connection too (else it has a
        thread of paho's)."""
        from salvo.organiser.tournament.spool import Spool

        self.broker = broker
        self.arenas = arenas
        self.state = state
        self.state_path = state_path
        #: arena -> the teams its lobby admits now (read by the referee's arenas)
        self.roster = roster
        self.referee = referee
        self.store = store
        self.no_show_after = no_show_after
        #: the registry's teams now (late entries are the ones not in the state)
        self.registered = registered
        self.stop = threading.Event()
        #: when the loop last came round (time.monotonic()), for /health
        self.ticked = time.monotonic()
        self._lock = threading.RLock()
        self._requests: queue.Queue[tuple[str, dict[str, Any], str, Future[dict[str, Any]]]] = queue.Queue()
        self._next_registry_check = 0.0
        self.spool = Spool(state_path)
        self.spool.applied(self)
        #: arena -> the teams of its finished game, busy until the arena is back in its lobby
        #: (they are still listed there: a team is never listed in two arenas; see .games)
        self.finishing: dict[str, set[str]] = {}
        #: arena -> the table size its referee was set to (tables of 3-4 only; see .games)
        self.seated: dict[str, int] = {}
        #: arena -> when its intruders were last sent away (not every step)
        self._cleared: dict[str, float] = {}
        filters = [TournamentTopics.assignments(), TournamentTopics.marker]
        for a in arenas:
            t = Topics(a)
            filters += [
                t.state,
                t.server,
                t.game_id,
                t.players_list,
                t.current,
                t.turn,
                t.deadline,
                t.stats_summary,
                t.stats_player("+"),
                t.approved("+", "+"),
            ]
        self._filters = set(filters)
        self.rec = Recorder(broker, filters, label="tournament", keep="latest", loop=loop)
        self._sync()
        self._synced_connects = self.rec.connects

    # -- what the broker says -------------------------------------------------------------

    def _sync(self) -> None:
        """Until every retained message of the subscription is in (they come before the marker)."""
        token = f"sync-{time.monotonic_ns()}"
        self.rec.send(TournamentTopics.marker, token)
        self.rec.wait(lambda m: m.topic == TournamentTopics.marker and m.payload == token.encode(), timeout=10)

    def _resync(self) -> None:
        """After the recorder reconnected (a broker restart): what the broker
        cleared meanwhile, e.g. a lobby's players list at an arena's reset,
        left no message; the values it no longer holds are forgotten once it
        has sent every retained one again. Without this a stale list kept an
        arena "occupied" for the rest of the night (tests/test_tournament_faults.py)."""
        if self.rec.connects == self._synced_connects:
            return
        connects, since = self.rec.connects, self.rec.connected_at
        try:
            self._sync()
        except TimeoutError:  # away again: at the next step
            return
        self._synced_connects = connects
        if gone := self.rec.forget_before(since):
            log.info("after a reconnect the broker no longer holds %d retained topics, e.g. %s", len(gone), gone[0])

    def value(self, topic: str) -> bytes | None:
        msg = self.rec.latest(topic)
        return msg.payload if msg is not None else None

    def arena_state(self, arena: str) -> str:
        return (self.value(Topics(arena).state) or b"").decode() or "idle"

    def _lobby_empty(self, arena: str) -> bool:
        t = Topics(arena)
        return self.value(t.state) == b"lobby" and self.value(t.players_list) in (None, b"", b"[]")

    # -- publishing -----------------------------------------------------------------------

    def publish(self, topic: str, body: object) -> None:
        # Waits for the PUBACK: the last ones ("done") must not be lost to close().
        self.rec.publish(topic, dumps(body) if body != "" else "", retain=True)

    def tell(self, team: str, body: object) -> None:
        self.publish(TournamentTopics.assignment(team), body)

    def publish_standings(self) -> list[Row]:
        rows = self.state.table()
        self.publish(
            TournamentTopics.standings,
            {
                "format": self.state.format,
                "table_size": self.state.table_size,
                "rounds": self.state.total_rounds,
                "games_played": sum(1 for r in self.state.results if r.counts),
                "paused": self.state.paused,
                "done": self.state.done,
                "table": [r.as_json() for r in rows],
            },
        )
        return rows

    def publish_schedule(self) -> None:
        st = self.state
        current = min((f.round for i, f in enumerate(st.fixtures) if not st.fixture_done(i)), default=st.drawn)
        games = [f.teams for f in st.fixtures if f.round == current]
        fixtures = [{"round": f.round, "teams": f.teams, "done": st.fixture_done(i)} for i, f in enumerate(st.fixtures)]
        self.publish(TournamentTopics.schedule, {"round": current, "games": games, "fixtures": fixtures})

    def save(self) -> None:
        self.state.save(self.state_path)

    # -- start and restart ---------------------------------------------------------------

    def adopt(self) -> list[str]:
        """Before the referee takes messages: the games assigned before a stop
        go on (their teams let in at once, so a join the broker delivers again
        is admitted); games that ended meanwhile are recorded from the journal."""
        from salvo.organiser.tournament import adoption

        with self._lock:
            return adoption.adopt(self)

    def run(self) -> list[Row] | None:
        """Until the tournament is over (the final standings) or stopped (None)."""
        self.ticked = time.monotonic()
        with self._lock:
            self.state.draw()
            self.save()
            self.publish_schedule()
            self.publish_standings()
        while not self.stop.is_set():
            self.ticked = time.monotonic()
            if self.referee is not None and self.referee.any_stopped():
                log.error("the referee of the arenas stopped: the night cannot go on; nothing more is assigned")
                return None
            self._serve_requests()
            with self._lock:
                self._resync()
                self.spool.serve(self)
                self.check_registry()
                for arena in self.arenas:
                    try:
                        self._step(arena)
                    except Exception:  # one arena's surprise (a payload no salvo referee sends) is not the night's
                        log.exception("arena %s: its state could not be followed; the organiser may abort it", arena)
                if not self.state.paused:
                    self._assign()
                if self.state.finished():
                    return self._finish()
            self._wait(self.rec.received)
        return None

    def linger(self) -> None:
        """After the night (its final ranking), until stopped: keep answering
        the organiser (status, a correction, the exports) while the console
        and the projector serve the champion."""
        while not self.stop.is_set():
            self.ticked = time.monotonic()
            self._serve_requests()
            with self._lock:
                self.spool.serve(self)
            self._wait(self.rec.received)

    def _wait(self, seen: int) -> None:
        """Until a message comes, a control is asked for or a stop (at most 0.5 s)."""
        self.rec.wait_until(lambda: self.rec.received != seen or self.stop.is_set() or not self._requests.empty(), 0.5)

    def _finish(self) -> list[Row]:
        self.state.done = True
        self.save()
        for team in self.state.teams:
            if team not in self.state.withdrawn:
                self.tell(team, {"done": True})
        log.info("the tournament is over")
        self.publish_schedule()
        return self.publish_standings()

    # -- assigning ----------------------------------------------------------------------

    def busy_teams(self) -> set[str]:
        live = {t for lv in self.state.live.values() for t in self.state.fixtures[lv.fixture].teams}
        return live.union(*self.finishing.values())

    def _assign(self) -> None:
        if self.state.draw():
            self.save()
            self.publish_schedule()
        for arena in self.arenas:
            if arena in self.state.live:
                continue
            if not self._lobby_empty(arena):
                self._send_intruders_away(arena)
                continue
            busy = self.busy_teams()
            # The first fixture none of whose teams is playing or waiting elsewhere.
            pick = next((i for i in self.state.pending() if not busy & set(self.state.fixtures[i].teams)), None)
            if pick is None:
                return
            fixture = self.state.fixtures[pick]
            games.seat(self, arena, len(fixture.teams))
            self.state.live[arena] = Live(pick, arena, time.time(), assignment_id=f"{pick}-{len(self.state.results)}")
            self.save()
            self.roster[arena] = set(fixture.teams)
            self.tell_assignment(arena)
            log.info("round %d: %s in arena %s", fixture.round, " vs ".join(fixture.teams), arena)

    def tell_assignment(self, arena: str) -> None:
        """Tell the teams of the fixture live in ``arena`` to play there (again,
        for a director taking its games back: the same id)."""
        live = self.state.live[arena]
        fixture = self.state.fixtures[live.fixture]
        for team in fixture.teams:
            others = [t for t in fixture.teams if t != team]
            body: dict[str, Any] = {"id": live.told_id(), "round": fixture.round, "arena": arena, "opponents": others}
            if len(others) == 1:
                body["opponent"] = others[0]
            self.tell(team, body)

    def _send_intruders_away(self, arena: str) -> None:
        """An arena no fixture holds whose lobby has players: nobody put
        them there (every roster is emptied when its game ends), so they
        would hold it for the rest of the night. Close its lobby."""
        listed, now, last = self.listed(arena), time.monotonic(), self._cleared.get(arena)
        if self.value(Topics(arena).state) != b"lobby" or not listed or arena in self.finishing:
            return
        if self.referee is None or (last is not None and now - last < INTRUDERS_EVERY_S):
            return
        self._cleared[arena] = now
        reason = f"not on the tournament's roster: {', '.join(listed)} (no game is assigned to arena {arena})"
        if self.referee.close_lobby(arena, reason):
            log.warning("arena %s: sent away %s", arena, reason)

    # -- following a game (salvo.organiser.tournament.games) ------------------------------

    def _step(self, arena: str) -> None:
        games.step(self, arena)

    def hold_the_finished(self) -> None:
        games.hold_the_finished(self)

    def listed(self, arena: str) -> list[str]:
        """The names on the arena's retained /players/list."""
        raw = self.value(Topics(arena).players_list) or b"[]"
        try:
            return [p for p in json.loads(raw) if isinstance(p, str)]
        except (ValueError, TypeError):
            return []

    def record(self, arena: str | None, result: GameResult) -> None:
        self.state.results.append(result)
        if arena is not None:
            self.state.live.pop(arena, None)
            self.roster[arena] = set()
            if result.status == "played":
                # Listed there until the referee's reset (the stats come before the state says over).
                self.finishing[arena] = set(result.players)
        self.save()
        # Its teams have nothing to play now: their assignment topics go empty
        # ("empty between games"), also while the tournament is paused and no
        # next game replaces them. Called off (no-show, abort, withdrawal): a
        # team that has not come yet must not go and join a game that is not
        # there any more.
        playing = {t for lv in self.state.live.values() for t in self.state.fixtures[lv.fixture].teams}
        for team in result.players:
            if team not in self.state.withdrawn and team not in playing:
                self.tell(team, "")
        rows = self.publish_standings()
        self.publish_schedule()
        log.info(
            "round %d%s: %s; winner %s | leader %s (%d pts)",
            result.round,
            f" in {arena}" if arena else "",
            " vs ".join(result.players),
            result.winner or "nobody",
            rows[0].team,
            rows[0].points,
        )

    # -- late teams ------------------------------------------------------------------------

    def check_registry(self, *, now: bool = False) -> None:
        """New registry entries become late teams (pending). Looked at every
        REGISTRY_CHECK_S, or at once (``now``): a late team's control may
        come before the next look (teams add, then admit-late at once)."""
        if not now and time.monotonic() < self._next_registry_check:
            return
        self._next_registry_check = time.monotonic() + REGISTRY_CHECK_S
        try:
            names = self.registered()
        except Exception:  # a registry being rewritten: look again next time
            return
        for team in names:
            if team not in self.state.teams and team not in self.state.late:
                self.state.late[team] = "pending"
                self.save()
                log.warning("%s registered after the start: admit-late or refuse-late decides", team)
                self.tell(team, {"waiting": "registered after the start: the organisers decide whether you play"})

    # -- controls ------------------------------------------------------------------------

    def request(self, action: str, args: dict[str, Any], by: str, timeout: float = 30.0) -> dict[str, Any]:
        """From any thread: have the loop apply a control; its audit entry
        (raises ControlError when refused). Applied at once when the loop is
        not running (before start, after a stop)."""
        future: Future[dict[str, Any]] = Future()
        self._requests.put((action, args, by, future))
        return future.result(timeout)

    def _serve_requests(self) -> None:
        from salvo.organiser.tournament import actions

        while True:
            try:
                action, args, by, future = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                with self._lock:
                    future.set_result(actions.apply(self, action, args, by))
            except ControlError as err:
                future.set_exception(err)
            except Exception as err:  # a bug must not end the night: tell the caller
                log.exception("control %s failed", action)
                future.set_exception(ControlError("internal", f"{action} failed: {err}"))

    # -- the organiser's view (salvo.organiser.tournament.controls.Controls) --------------------------

    def apply(self, action: str, args: dict[str, Any], by: str) -> dict[str, Any]:
        return self.request(action, args, by)

    def status(self) -> dict[str, Any]:
        from salvo.organiser.tournament import reports

        with self._lock:
            return reports.status(self.state, [self._arena_view(a) for a in self.arenas], not self.stop.is_set())

    def export_json(self) -> dict[str, Any]:
        from salvo.organiser.tournament import reports

        with self._lock:
            return reports.export_json(self.state)

    def export_csv(self, what: str) -> str:
        from salvo.organiser.tournament import reports

        with self._lock:
            return reports.export_csv(self.state, what)

    def health(self) -> dict[str, Any]:
        """For a container's healthcheck (``GET /health`` on the console's
        server): ``ok`` when the loop came round within LOOP_STALE_S and every
        arena of its referee is connected to the broker; ``reason`` says what
        is wrong otherwise. Nothing secret; never waits for the loop (its
        lock), so a stuck loop is reported, not joined."""
        since = time.monotonic() - self.ticked
        arenas = self.referee.arenas_up() if self.referee is not None else {}
        wrong = []
        if self.stop.is_set():
            wrong.append("the director is stopping")
        elif since > LOOP_STALE_S:
            wrong.append(f"the director's loop has not come round for {since:.0f} s")
        down = [a or "(default)" for a, up in arenas.items() if not up]
        if down:
            wrong.append(f"not connected to the broker: {', '.join(down)}")
        body: dict[str, Any] = {
            "ok": not wrong,
            "loop_s": round(since, 1),
            "arenas": {a or "(default)": "up" if up else "down" for a, up in arenas.items()},
        }
        if wrong:
            body["reason"] = "; ".join(wrong)
        return body

    def _arena_view(self, arena: str) -> dict[str, Any]:
        t = Topics(arena)
        live = self.state.live.get(arena)
        fixture = self.state.fixtures[live.fixture] if live else None
        server = self.value(t.server) if t.server in self._filters else None
        view: dict[str, Any] = {
            "arena": arena,
            "state": self.arena_state(arena) if server != b"down" else "down",
            "round": fixture.round if fixture else None,
            "teams": list(fixture.teams) if fixture else [],
            "since": live.assigned_at if live else None,
            "paused": False,
            "turn": None,
            "current": (self.value(t.current) or b"").decode() or None,
        }
        for topic, key in ((t.deadline, "paused"), (t.turn, "turn")):
            try:
                body = json.loads(self.value(topic) or b"null")
            except ValueError:
                continue
            if isinstance(body, dict):
                view[key] = bool(body.get("paused")) if key == "paused" else body.get("turn")
        return view

    def close(self) -> None:
        self.stop.set()
        self._serve_requests()
        self.rec.close()
