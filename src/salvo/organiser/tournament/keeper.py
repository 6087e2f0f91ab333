"""The director's slow work, off the referee's loop: its state file's saves
and the journal look-up at a result (docs/reliability.md).

One worker thread (``tournament-disk``) does it in the order it was asked,
so saves land in order and a reply written after a save follows it. On
the loop a save costs a pickled snapshot of the state (0.11 ms for a 43 kB
state, where the JSON and its fsync take 3.5 ms: ``pytest -m long -s
tests/test_tournament_offloop.py``); the JSON, the write and the fsync are
the worker's. What a change of state makes public (a team's
assignment, the standings, a control's answer) waits in :meth:`after_saved`
until that state is on disk, as when the save blocked: a crash before it
loses the change and what it would have told, never one without the other.
The worker hands each save's end back with ``Loop.call_soon_threadsafe``.

Off the loop's thread (a director without a loop, its adoption before the
night, its close after the loop) everything runs at once, in the same
order: what the worker holds first, then this.
"""

from __future__ import annotations

import collections
import logging
import pickle
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from salvo.organiser.tournament.state import State, write

if TYPE_CHECKING:
    from salvo.net.loop import Loop

log = logging.getLogger("salvo.organiser.tournament")

T = TypeVar("T")


class Keeper:
    def __init__(self, path: Path, loop: Loop | None, failed: Callable[[Exception], None]) -> None:
        """``failed(error)``: on the loop, a save that did not reach the disk
        (what it would have made public stays held until a later save does)."""
        self.path = path
        self.loop = loop
        self._failed = failed
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tournament-disk") if loop is not None else None
        #: saves asked on the loop, and the last of them on disk (they end in order)
        self._asked = 0
        self._durable = 0
        #: what waits for a save: (the save it waits for, the effect), in order
        self._held: collections.deque[tuple[int, Callable[[], object]]] = collections.deque()
        self._shut = False
        #: the last save failed (what waits for it waits for the next)
        self.broken = False

    def _on_loop(self) -> bool:
        return self.loop is not None and self.loop.in_thread()

    def save(self, state: State) -> None:
        if not self._on_loop() or self._shut:  # (after close(): a lingering step's, at once)
            self.run(lambda: write(self.path, asdict(state))).result()
            return
        # A snapshot the loop may go on changing the state after (pickle: C speed).
        snapshot = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        self._asked += 1
        assert self._pool is not None
        self._pool.submit(self._write, self._asked, snapshot)

    def _write(self, seq: int, snapshot: bytes) -> None:  # on the worker
        assert self.loop is not None
        try:
            write(self.path, asdict(pickle.loads(snapshot)))  # (our own bytes, a moment old)
        except Exception as exc:
            log.exception("the tournament's state could not be saved to %s", self.path)
            self.loop.call_soon_threadsafe(self._broke, exc)
            return
        self.loop.call_soon_threadsafe(self._saved, seq)

    def _broke(self, error: Exception) -> None:  # on the loop
        self.broken = True
        self._failed(error)

    def _saved(self, seq: int) -> None:  # on the loop
        self.broken = False
        self._durable = seq  # (a later save holds everything an earlier, failed one did)
        while self._held and self._held[0][0] <= seq:
            self._held.popleft()[1]()

    def after_saved(self, effect: Callable[[], object]) -> None:
        """``effect()`` once every save asked so far is on disk (at once when
        they are), after the effects asked before it."""
        if not self._on_loop() or (not self._held and self._durable == self._asked):
            effect()
        else:
            self._held.append((self._asked, effect))

    def run(self, work: Callable[[], T]) -> Future[T]:
        """``work()`` on the worker, after what it was asked before; off the
        loop's thread, done at once (after the worker's queue)."""
        if self._pool is None or self._shut:
            future: Future[T] = Future()
            future.set_result(work())
            return future
        done = self._pool.submit(work)
        if not self._on_loop():
            done.result()
        return done

    def close(self) -> None:
        """Wait for what the worker was asked (the last saves)."""
        self._shut = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
