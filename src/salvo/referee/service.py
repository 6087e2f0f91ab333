"""The referee service: every arena on one event-loop thread, a pool that
derives keys, one journal.

Threads, and why:

* one *loop thread* (:mod:`salvo.net.loop`, epoll) drives every arena's two paho
  connections: paho's socket callbacks register them with the loop, which
  calls ``loop_read``/``loop_write``/``loop_misc`` (no paho threads; see
  :mod:`salvo.net.link`). It owns the :class:`~salvo.arena.arena.Arena`
  objects; each arena is an :class:`~salvo.referee.runner.ArenaRunner` whose every
  wait (connecting, the start-up sweep, stopping) is a state driven by loop
  callbacks and timers, so no arena holds up another. One thread, not one
  per arena: every hand-over between threads costs a GIL switch, and under
  load those switches, not the game, were most of the referee's CPU (see
  docs/performance.md).
* a thread pool derives argon2id keys (70 ms, 64 MiB each; libsodium
  releases the GIL), so joins never stall other messages; results are
  handed back to the loop thread (``call_soon_threadsafe``).

In ``salvo tournament run`` the director's watcher, its steps and the
projector's feed run on this loop too (``start(arenas=False)`` runs the loop
before the arenas begin; CONTRIBUTING.md, "Threads").

Every arena has its own MQTT connections because the retained last will
(``/game/server`` = ``down``) is per connection.

The modules: :mod:`salvo.net.loop` (the generic loop), :mod:`salvo.net.link`
(one paho client on it), :mod:`salvo.referee.batch` (an arena's batches),
:mod:`salvo.referee.runner` (an arena's connections and states), :mod:`salvo.referee.flood`
(what holds a flood), :mod:`salvo.arena.resume` (arenas from the journal).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Final

from salvo.arena.arena import Arena, Effect
from salvo.arena.journal import Store
from salvo.arena.resume import Heartbeat, write_health
from salvo.arena.statefile import StoreFailure
from salvo.net.loop import Loop
from salvo.net.mqtt import Broker
from salvo.referee.admission import Registry
from salvo.referee.batch import Fatal, Journal, Stop
from salvo.referee.runner import ArenaRunner

log = logging.getLogger("salvo.referee")

#: How often the loop makes sure the state file is still its own.
INTACT_EVERY_S: Final = 1.0
#: A stop waits this long for the arenas to say 'down' and disconnect (each
#: gives up sooner: runner.DOWN_WAIT_S + runner.CLOSE_WAIT_S); then it
#: returns regardless, and an arena still connected when the process ends
#: has the broker's last will say 'down'. A signal ends the process in 2 s.
STOP_WAIT_S: Final = 1.2
#: The default resume window (``salvo referee --resume-window``): a referee
#: away longer starts on a clean MQTT session, and what was queued for it
#: while it was away is dropped (docs/reliability.md, "Stale traffic").
RESUME_WINDOW_S: Final = 120
#: File descriptors an arena needs (two sockets), and the referee besides.
_FDS_PER_ARENA: Final = 2
_FDS_SPARE: Final = 256


class Referee:
    """Several arenas on one loop thread, one key-derivation pool, one journal."""

    def __init__(
        self,
        arenas: list[Arena],
        broker: Broker,
        *,
        client_id: str = "salvo-referee",
        journal: Journal | None = None,
        workers: int | None = None,
        session_expiry_s: int = RESUME_WINDOW_S,
        registry: Registry | None = None,
        health_file: Path | None = None,
    ) -> None:
        """``session_expiry_s`` is the resume window: the MQTT 5 session
        expiry, and how long the referee may have been away (its state
        file's heartbeat says) for what the broker queued meanwhile to be
        applied; away longer, every arena starts on a clean session."""
        if registry is not None:
            for arena in arenas:
                # An arena with its own rule (a tournament's roster) keeps it:
                # that rule consults the registry itself.
                if arena.admit is None:
                    arena.admit = registry.admit
        # argon2id is CPU-bound and takes 64 MiB while it runs: one worker per
        # core is as fast as more, and bounds that memory (6 workers: 400 MB).
        self.pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="argon2")
        self.journal = journal
        #: When this referee (with this state file) was last alive: read now,
        #: before this run beats it.
        self.heartbeat = Heartbeat.beside(journal.path) if isinstance(journal, Store) else None
        discard = self.heartbeat is not None and self.heartbeat.stale(time.time(), session_expiry_s)
        #: Rewritten every second from the loop (salvo night health reads it).
        self.health_file = health_file
        self._fatal: Fatal | None = None
        self.loop = Loop(on_error=self._loop_failed)
        self.runners = [
            ArenaRunner(
                arena,
                broker,
                client_id=f"{client_id}-{arena.topics.prefix}" if arena.topics.prefix else client_id,
                pool=self.pool,
                journal=journal,
                session_expiry_s=session_expiry_s,
                discard_session=discard or arena.replaced,
                registry=registry,
                loop=self.loop,
                on_stopped=self._arena_stopped,
            )
            for arena in arenas
        ]
        self._thread = threading.Thread(target=self._run, name="arenas", daemon=True)
        self._begun = False
        #: the same controls without waiting (the tournament's director, on the loop)
        self.soon = Soon(self)

    def start(self, *, arenas: bool = True) -> None:
        """Run the loop's thread; with ``arenas``, begin every arena on it.
        Without, they begin at the next ``start()``: a tournament's director
        subscribes on the loop first, and knows what the broker retains
        before any arena takes a message."""
        if self._thread.ident is None:
            _raise_fd_limit(len(self.runners))
            self._thread.start()
        if arenas and not self._begun:
            self._begun = True
            self.loop.call_soon_threadsafe(self._begin)

    def _begin(self) -> None:
        for runner in self.runners:
            runner.begin()

    def _run(self) -> None:
        try:
            self.loop.call_later(INTACT_EVERY_S, self._every_second)
            self._beat()
            self.loop.run()
        finally:
            for runner in self.runners:  # stopped, whatever they were doing
                runner.abandon()
            self.loop.close()

    def _every_second(self) -> None:
        """Is the state file still there, still the same file? (StoreFailure
        goes to _loop_failed.) Then the heartbeat and the health file: both
        say the loop itself is alive."""
        self.loop.call_later(INTACT_EVERY_S, self._every_second)
        if self.journal is not None:
            self.journal.check_intact()
        self._beat()

    def _beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat()
        if self.health_file is not None:
            write_health(self.health_file, self.health())

    def health(self) -> str:
        """'ok' while every arena is connected to the broker and serving,
        else which are not (:meth:`arenas_up`)."""
        away = [prefix or "(default)" for prefix, up in self.arenas_up().items() if not up]
        return f"no broker connection for {', '.join(away)}" if away else "ok"

    def _loop_failed(self, exc: Exception) -> None:
        """What an arena's own error isolation passed on: the journal cannot
        take what follows (disk full, I/O error, the file gone), so no arena
        can go on and nothing more is published; or a bug outside any arena."""
        if isinstance(exc, StoreFailure):
            log.error("%s", exc)
            fatal = Fatal(Stop.STATE, str(exc))
        else:
            log.error("the referee's loop failed (a bug); stopping every arena", exc_info=exc)
            fatal = Fatal(Stop.INTERNAL, f"internal error: {exc!r}")
        for runner in self.runners:
            if runner.alive:
                runner.stop_with(fatal)

    def _arena_stopped(self, _runner: ArenaRunner) -> None:
        if not any(runner.alive for runner in self.runners):
            self.loop.stop()

    def arenas_up(self) -> dict[str, bool]:
        """Each arena (by prefix): is it connected to the broker and serving
        now? From any thread; it does not wait for the loop."""
        return {r.arena.topics.prefix: r.connected.is_set() for r in self.runners}

    def wait_connected(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        return all(r.connected.wait(max(0.0, end - time.monotonic())) for r in self.runners)

    def ask(self, prefix: str, action: Callable[[Arena, float], list[Effect]]) -> Future[bool]:
        """From any thread, the loop's too: apply ``action`` to arena
        ``prefix``'s game without waiting (see ArenaRunner.control_soon)."""
        return self._runner(prefix).control_soon(action)

    def _runner(self, prefix: str) -> ArenaRunner:
        runner = next((r for r in self.runners if r.arena.topics.prefix == prefix), None)
        if runner is None:
            raise KeyError(f"this referee runs no arena {prefix!r}")
        return runner

    def stop(self) -> None:
        """Every arena says 'down' and disconnects; back within STOP_WAIT_S."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop_arenas)
            self._thread.join(STOP_WAIT_S)
            if self._thread.is_alive():
                log.warning("the arenas did not finish stopping in %g s: the last will says 'down'", STOP_WAIT_S)
        elif self._thread.ident is None:  # never started
            self.loop.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.journal is not None and self.fatal is None:
            # A clean stop over a state file emptied or replaced since the last
            # look must not exit 0: the next start could not find the game.
            try:
                self.journal.check_intact()
            except StoreFailure as exc:
                log.error("%s", exc)
                self._fatal = Fatal(Stop.STATE, str(exc))

    def _stop_arenas(self) -> None:
        self.loop.call_later(STOP_WAIT_S, self.loop.stop)  # whatever is still under way
        for runner in self.runners:
            if runner.alive:  # (begun: a loop started without its arenas stops at once)
                runner.halt()
        if not any(runner.alive for runner in self.runners):
            self.loop.stop()

    @property
    def fatal(self) -> Fatal | None:
        return self._fatal or next((r.fatal for r in self.runners if r.fatal), None)

    def any_stopped(self) -> bool:
        """An arena stopped (on its own, or with the loop). Not "not alive":
        asked while the loop's thread was still beginning a thousand arenas,
        that made `salvo referee` stop at once, silently, with exit code 0."""
        return any(r.stopped for r in self.runners)


class Soon:
    """The organiser's controls of one arena's game, from any thread, the
    loop's too; for the tournament's director, which runs on the referee's
    own loop and so must never wait there. Each is applied on the loop's
    thread between batches, journaled and published like any event, and
    answers a Future once the arena has applied it (True: it changed the
    game; False: nothing to do, or refused). An arena that is down or
    stopping never answers: the asker gives up after a while
    (salvo.organiser.tournament.steps; salvo.net.loop.answer)."""

    def __init__(self, referee: Referee) -> None:
        self._referee = referee

    def close_lobby(self, prefix: str, reason: str) -> Future[bool]:
        """Send everybody in arena ``prefix``'s lobby away."""
        return self._referee.ask(prefix, lambda arena, now: arena.close_lobby(reason, now))

    def pause_game(self, prefix: str, reason: str) -> Future[bool]:
        """Stop the running deadline (placement, turn or reset) of arena
        ``prefix``; teams see ``/game/deadline`` with ``"paused": true``.
        Messages are still applied; no timeout fires until resume_game."""
        return self._referee.ask(prefix, lambda arena, now: arena.pause(reason, now))

    def resume_game(self, prefix: str) -> Future[bool]:
        """Start the clock again with the time it had left when paused."""
        return self._referee.ask(prefix, lambda arena, now: arena.resume(now))

    def extend(self, prefix: str, seconds: float) -> Future[bool]:
        """``seconds`` more on the running (or paused) deadline."""
        return self._referee.ask(prefix, lambda arena, now: arena.add_time(seconds, now))

    def abort_game(self, prefix: str, reason: str) -> Future[bool]:
        """End the game in progress without a result: its players are told
        why (``game_aborted``) and the arena opens an empty lobby. False for
        an empty lobby and for a game over (its result stands)."""
        return self._referee.ask(prefix, lambda arena, now: arena.abort(reason, now))

    def seat(self, prefix: str, players: int) -> Future[bool]:
        """Arena ``prefix``'s games from now on start with exactly ``players``
        (a tournament table of that size: the game waits for all of them,
        and takes nobody else). Journaled like a restart with new settings.
        True when it is so now (changed, or already)."""
        already: list[bool] = []

        def configure(arena: Arena, now: float) -> list[Effect]:
            config = arena.game.config
            if config.min_players == config.max_players == players:
                already.append(True)
                return []
            return arena.configure(dataclasses.replace(config, min_players=players, max_players=players), now)

        seated: Future[bool] = Future()

        def answered(done: Future[bool]) -> None:
            seated.set_result((done.exception() is None and done.result()) or bool(already))

        self._referee.ask(prefix, configure).add_done_callback(answered)
        return seated

    def arenas_up(self) -> dict[str, bool]:
        return self._referee.arenas_up()

    def any_stopped(self) -> bool:
        return self._referee.any_stopped()


def _raise_fd_limit(arenas: int) -> None:
    """Two sockets an arena: a thousand arenas need more descriptors than
    the usual soft limit of 1024. Raised up to the hard limit, if need be."""
    wanted = _FDS_PER_ARENA * arenas + _FDS_SPARE
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open file limit from %d to %d: %s", soft, new, exc)
        return
    if new < wanted:
        log.warning("open file limit %d (the hard limit): %d arenas need about %d", new, arenas, wanted)
