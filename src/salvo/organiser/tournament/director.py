"""The director: assign fixtures to arenas, follow each arena's game,
record results, publish the standings.

It runs on the loop of the referee of its arenas (salvo.net.loop), as loop
callbacks: a step at every message from the arenas it watches (of the arena
it concerns), and one of everything twice a second. Its disk work (saves,
the journal look-up at a result) is its worker's (:mod:`.keeper`): what a
change makes public waits until the state that holds it is on disk. Each
arena is a small state machine read from its public topics
(empty lobby -> assigned -> playing -> recorded -> empty lobby), so no arena
waits for another and a stop is taken at once. A step that needs the
referee's answer (a lobby closed, a table seated) waits for it without
blocking the loop (:mod:`.steps`). Controls from the console or the CLI are
handed to the loop and applied between steps; the console reads the
director's state through the loop too (:meth:`Director.on_loop`, the one
place another thread touches it). Without a loop (tests, tools) every call
runs on the caller's thread.

What a stop (SIGTERM/SIGINT) does: nothing that sends a team home. The loop
ends, the state is saved, assignments stay as they are; a restart with the
same files adopts the games in progress from the referee's journal (and the
results of games that ended while it was away).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from salvo.net.mqtt import Broker
from salvo.net.watch import Msg, Recorder
from salvo.organiser.tournament import games, health, reports, steps
from salvo.organiser.tournament.controls import ControlError
from salvo.organiser.tournament.keeper import Keeper
from salvo.organiser.tournament.scoring import GameResult, Row
from salvo.organiser.tournament.state import Live, State
from salvo.organiser.tournament.steps import ArenaOps, Step
from salvo.spec.codec import dumps
from salvo.spec.topics import Topics, TournamentTopics, arena_of

if TYPE_CHECKING:
    from salvo.arena.journal import Store
    from salvo.net.loop import Loop

log = logging.getLogger("salvo.organiser.tournament")

T = TypeVar("T")

REGISTRY_CHECK_S = 2.0
#: A step comes at least this often (besides one at every message).
TICK_S = 0.5
#: How long another thread waits for the loop to read or apply something.
HANDOVER_WAIT_S = 30.0
#: How long a stop waits for the broker to acknowledge what was published.
FLUSH_WAIT_S = 5.0


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
        self.loop = loop
        self._runner = steps.Runner(loop) if loop is not None else None
        #: controls handed over, applied between steps (on the loop's thread)
        self._requests: collections.deque[tuple[str, dict[str, Any], str, Future[dict[str, Any]]]] = collections.deque()
        self._step_due = False
        #: what the next step looks at: every arena and the files (None), or these arenas
        self._due: set[str] | None = set()
        self._started = False
        self._closed = False  # (close() is over: calls run at once)
        #: the night's outcome: the final standings, or None (stopped)
        self._outcome: Future[list[Row] | None] = Future()
        self._ended = False  # (the outcome decided; set once its state is on disk)
        self.keeper = Keeper(state_path, loop, self._save_failed)
        self._lingering = False
        #: a resync under way: (connection count, its first position, the marker's token)
        self._resyncing: tuple[int, int, str] | None = None
        self._next_registry_check = 0.0
        self.spool = Spool(state_path)
        self.spool.applied(self)
        #: arena -> the teams of its finished game, busy until the arena is back in its lobby
        #: (they are still listed there: a team is never listed in two arenas; see .games)
        self.finishing: dict[str, set[str]] = {}
        #: arena -> the table size its referee was set to (tables of 3-4 only; see .games)
        self.seated: dict[str, int] = {}
        #: arena -> when its intruders were last sent away (not every step: games.send_intruders_away)
        self.cleared: dict[str, float] = {}
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
        self.filters = set(filters)
        self.rec = Recorder(broker, filters, label="tournament", keep="latest", loop=loop)
        self._sync()
        self._synced_connects = self.rec.connects
        self.rec.on_change = self._kick

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
        # Not waited for (the loop's thread): its marker sent, looked for at the next steps.
        if self._resyncing is None or self._resyncing[0] != self.rec.connects:
            token = f"sync-{time.monotonic_ns()}"
            self._resyncing = (self.rec.connects, self.rec.connected_at, token)
            self.rec.send(TournamentTopics.marker, token)
            return
        connects, since, token = self._resyncing
        if self.value(TournamentTopics.marker) != token.encode():
            return  # not back yet (or away again: a new marker when it reconnects)
        self._synced_connects, self._resyncing = connects, None
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
        # Not waited for on the loop; close() waits for every PUBACK (the last ones, "done").
        payload = dumps(body) if body != "" else ""
        if self.loop is None:
            self.rec.publish(topic, payload, retain=True)
        else:  # (what the state says is told once it is on disk)
            self.keeper.after_saved(lambda: self.rec.send(topic, payload, retain=True))

    def tell(self, team: str, body: object) -> None:
        self.publish(TournamentTopics.assignment(team), body)

    def publish_standings(self) -> list[Row]:
        rows = self.state.table()
        self.publish(TournamentTopics.standings, reports.standings(self.state, rows))
        return rows

    def publish_schedule(self) -> None:
        self.publish(TournamentTopics.schedule, reports.schedule(self.state))

    def save(self) -> None:
        self.keeper.save(self.state)

    def _save_failed(self, error: Exception) -> None:
        if not self._ended:  # (raised by run(), as when the save was the loop's)
            self._ended = True
            self._outcome.set_exception(error)

    # -- start and restart ---------------------------------------------------------------

    def adopt(self) -> list[str]:
        """Before the referee takes messages (and before :meth:`run`): the
        games assigned before a stop go on (their teams let in at once, so a
        join the broker delivers again is admitted); games that ended
        meanwhile are recorded from the journal."""
        from salvo.organiser.tournament import adoption

        return adoption.adopt(self)

    def run(self) -> list[Row] | None:
        """Until the tournament is over (the final standings) or stopped
        (None). The steps run on the loop; this thread waits for the outcome."""
        if self.loop is None:
            raise RuntimeError("the director runs on its referee's loop")
        self.loop.call_soon_threadsafe(self._begin)
        while True:
            try:
                return self._outcome.result(TICK_S)
            except TimeoutError:
                if self.loop.closed:  # (every arena stopped: no step will come)
                    log.error("the referee of the arenas stopped: the night cannot go on; nothing more is assigned")
                    return None

    def _begin(self) -> None:
        self.ticked = time.monotonic()
        try:
            self.state.draw()
            self.save()
            self.publish_schedule()
            self.publish_standings()
        except Exception as exc:  # (raised by run())
            self._ended = True
            self._outcome.set_exception(exc)
            return
        self._started = True
        self._tick()

    def linger(self) -> None:
        """After the night (its final ranking), until stopped: keep answering
        the organiser (status, a correction, the exports) while the console
        and the projector serve the champion."""
        self._lingering = True
        while not self.stop.wait(TICK_S):
            if self.loop is not None and self.loop.closed:
                return

    def halt(self) -> None:
        """From any thread (a signal handler's too): stop at the next step, at once."""
        self.stop.set()
        self._kick_from_anywhere()

    # -- the steps, on the loop's thread ------------------------------------------------

    def _kick(self, msg: Msg | None = None) -> None:
        """A step soon (once for all that comes before it): at every message
        (of its arena only: nothing else it follows changed), at a tick or a
        control (of everything)."""
        prefix, what = arena_of(msg.topic) if msg is not None else ("", None)
        if what is None or prefix not in self.arenas or self._due is None:
            self._due = None  # (the tournament's own topics too: the marker is the resync's)
        else:
            self._due.add(prefix)
        self._soon()

    def _soon(self) -> None:
        if self._started and not self._step_due:
            self._step_due = True
            assert self.loop is not None
            self.loop.call_soon(self._step_now)

    def _kick_from_anywhere(self) -> None:
        if self.loop is not None and not self.loop.closed:
            self.loop.call_soon_threadsafe(self._kick)

    def _tick(self) -> None:
        """Twice a second at least, whatever comes."""
        assert self.loop is not None
        self.loop.call_later(TICK_S, self._tick)
        self._kick()

    def _step_now(self) -> None:
        self._step_due = False
        assert self._runner is not None
        if self._runner.busy or (self._ended and not self._lingering):
            return  # (a step waits for the referee: the next comes after it)
        self.ticked = time.monotonic()
        only, self._due = self._due, set()
        self._runner.start(self._lingered() if self._lingering else self._step_all(only), self._stepped)

    def _stepped(self, outcome: Any, error: Exception | None) -> None:
        if self._ended:
            if error is not None:  # (after the night: the next step tries again)
                log.error("the director's step failed", exc_info=error)
        elif error is not None:  # (raised by run(), as from a loop of its own)
            self._ended = True
            self._outcome.set_exception(error)
        elif outcome is not _GOING:  # (the final state on disk first, and its "done" told)
            self._ended = True
            self.keeper.after_saved(lambda: self._outcome.set_result(outcome))
        if self._due is None or self._due:
            self._soon()  # (messages, controls, handed over while the step waited)

    def _step_all(self, only: set[str] | None = None) -> Step[Any]:
        """One step of the night: _GOING, or the outcome (the rows; None: stopped).
        ``only``: the arenas whose messages came (None: everything)."""
        if self.stop.is_set():
            return None
        if self.referee is not None and self.referee.any_stopped():
            log.error("the referee of the arenas stopped: the night cannot go on; nothing more is assigned")
            return None
        yield from self._serve_requests()
        self._resync()
        if only is None:  # (what no arena's message changes: the tick's)
            yield from self.spool.serve(self)
            self.check_registry()
        for arena in self.arenas:
            if only is not None and arena not in only:
                continue  # nothing it reads came (its clock, a no-show, is the tick's)
            try:
                yield from games.step(self, arena)
            except Exception:  # one arena's surprise (a payload no salvo referee sends) is not the night's
                log.exception("arena %s: its state could not be followed; the organiser may abort it", arena)
        # Every arena's lobby, whatever came: one arena's change (its teams
        # free again, a result, a round drawn) may seat a fixture in another.
        if not self.state.paused:
            yield from self._assign()
        if self.state.finished():
            return self._finish()
        return _GOING

    def _lingered(self) -> Step[Any]:
        yield from self._serve_requests()
        yield from self.spool.serve(self)
        return _GOING

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

    def _assign(self) -> Step[None]:
        if self.state.draw():
            self.save()
            self.publish_schedule()
        for arena in self.arenas:
            if arena in self.state.live:
                continue
            if not self._lobby_empty(arena):
                yield from games.send_intruders_away(self, arena)
                continue
            busy = self.busy_teams()
            # The first fixture none of whose teams is playing or waiting elsewhere.
            pick = next((i for i in self.state.pending() if not busy & set(self.state.fixtures[i].teams)), None)
            if pick is None:
                return
            fixture = self.state.fixtures[pick]
            yield from games.seat(self, arena, len(fixture.teams))
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

    # -- following a game (salvo.organiser.tournament.games) ------------------------------

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

    def request(self, action: str, args: dict[str, Any], by: str, timeout: float = HANDOVER_WAIT_S) -> dict[str, Any]:
        """From any thread: have the loop apply a control between steps; its
        audit entry (raises ControlError when refused). Applied at once, on
        this thread, by a director without a running loop (or after a stop)."""
        from salvo.organiser.tournament import actions

        if not self._handing_over():
            return actions.apply(self, action, args, by)
        future: Future[dict[str, Any]] = Future()
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._requested, (action, args, by, future))
        return self._answer(future, timeout)

    def _requested(self, request: tuple[str, dict[str, Any], str, Future[dict[str, Any]]]) -> None:
        self._requests.append(request)
        self._kick()

    def _serve_requests(self) -> Step[None]:
        from salvo.organiser.tournament import actions

        while self._requests:
            action, args, by, future = self._requests.popleft()
            try:
                entry = yield from actions.applying(self, action, args, by)
                self.keeper.after_saved(functools.partial(future.set_result, entry))  # (answered once saved)
            except ControlError as err:
                future.set_exception(err)
            except Exception as err:  # a bug must not end the night: tell the caller
                log.exception("control %s failed", action)
                future.set_exception(ControlError("internal", f"{action} failed: {err}"))

    def _handing_over(self) -> bool:
        """Does another thread's call go to the loop (else: it runs at once)?
        Until run() begins, a control handed over waits for the first step."""
        loop = self.loop
        return loop is not None and not loop.closed and not loop.in_thread() and not self._closed

    def on_loop(self, read: Callable[[], T]) -> T:
        """From any thread: ``read()`` run on the loop, between steps, and its
        value. The one place another thread (the console's) reads the
        director's state; without a running loop, read at once."""
        if not self._handing_over():
            return read()
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(read())
            except Exception as exc:
                future.set_exception(exc)

        assert self.loop is not None
        self.loop.call_soon_threadsafe(run)
        return self._answer(future, HANDOVER_WAIT_S)

    def _answer(self, future: Future[T], timeout: float) -> T:
        """``future``'s value, handed back by the loop within ``timeout``
        (else TimeoutError, at once when the loop is gone)."""
        end = time.monotonic() + timeout
        while True:
            try:
                return future.result(min(TICK_S, max(0.0, end - time.monotonic())))
            except TimeoutError:
                if time.monotonic() >= end or self.loop is None or self.loop.closed:
                    raise

    # -- the organiser's view (salvo.organiser.tournament.controls.Controls) --------------------------

    def apply(self, action: str, args: dict[str, Any], by: str) -> dict[str, Any]:
        return self.request(action, args, by)

    def status(self) -> dict[str, Any]:
        running = not self.stop.is_set()
        return self.on_loop(lambda: reports.status(self.state, [self._arena_view(a) for a in self.arenas], running))

    def export_json(self) -> dict[str, Any]:
        return self.on_loop(lambda: reports.export_json(self.state))

    def export_csv(self, what: str) -> str:
        return self.on_loop(lambda: reports.export_csv(self.state, what))

    def health(self) -> dict[str, Any]:
        """For a container's healthcheck (``GET /health``): see .health.health.
        Never waits for the loop, so a stuck loop is reported, not joined."""
        return health.health(self)

    def _arena_view(self, arena: str) -> dict[str, Any]:
        return health.arena_view(self, arena)

    def close(self) -> None:
        """From a thread but the loop's: stop; answer what was handed over;
        wait (a while) for the broker to acknowledge every publish; disconnect."""
        self.stop.set()
        if self._handing_over():
            done: Future[None] = Future()
            assert self.loop is not None and self._runner is not None
            runner = self._runner

            def last() -> None:
                if runner.busy:  # (its answer comes first; then this again)
                    assert self.loop is not None
                    self.loop.call_later(0.05, last)
                    return
                runner.start(self._serve_requests(), served)

            def served(_value: Any, _error: Exception | None) -> None:
                # What the last saves hold back is sent first (the flush waits for it); a broken disk holds it for good.
                if self.keeper.broken:
                    done.set_result(None)
                else:
                    self.keeper.after_saved(lambda: done.set_result(None))

            self.loop.call_soon_threadsafe(last)
            try:
                self._answer(done, HANDOVER_WAIT_S)
            except TimeoutError:
                log.warning("the director's last controls were not answered in time")
        else:
            steps.now(self._serve_requests())
        self.keeper.close()
        if self.loop is not None and not self.rec.flush(FLUSH_WAIT_S):
            log.warning("the broker did not acknowledge the director's last messages in %g s", FLUSH_WAIT_S)
        self.rec.close()
        self._closed = True


#: A step's outcome while the night goes on.
_GOING: Any = object()
