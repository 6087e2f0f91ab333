"""What the director asks of the referee, and how its work waits for the
answers without blocking a thread.

The director runs on the loop that serves its arenas (salvo.net.loop), so it
must never wait there: the referee applies a control (close a lobby, pause a
game, seat a table) on that same loop, between batches. A piece of the
director's work that needs such an answer is a generator: it yields what it
asked (an :data:`Answer`: a bool, or a Future of one) and is sent the bool
back. :class:`Runner` drives one at a time on the loop, resuming it when the
answer comes (or False after ANSWER_WAIT_S, as the referee's own controls
time out), and nothing else of the director's runs meanwhile, exactly as
when a thread blocked in the control. :func:`now` drives one on the calling
thread, blocking: for a director without a loop (tests, tools) and for any
thread but the loop's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from salvo.net.loop import answer

if TYPE_CHECKING:
    from salvo.net.loop import Loop

log = logging.getLogger("salvo.organiser.tournament")

T = TypeVar("T")

#: What the referee answers: at once (a stand-in), or later on its loop.
Answer = bool | Future[bool]
#: A piece of the director's work that may ask the referee.
Step = Generator[Answer, bool, T]

#: A control the referee has not answered after this long counts as refused
#: (the referee's own blocking controls wait as long).
ANSWER_WAIT_S = 10.0


class ArenaOps(Protocol):
    """What the director asks of the referee of its arenas
    (salvo.referee.service.Soon), all of it: each control answers True or
    False (it changed the game, or not), at once or later (a Future, resolved
    on the loop's thread; False when it did not come in time)."""

    def close_lobby(self, prefix: str, reason: str) -> Answer: ...

    def pause_game(self, prefix: str, reason: str) -> Answer: ...

    def resume_game(self, prefix: str) -> Answer: ...

    def extend(self, prefix: str, seconds: float) -> Answer: ...

    def abort_game(self, prefix: str, reason: str) -> Answer: ...

    def seat(self, prefix: str, players: int) -> Answer:
        """The arena's game starts when ``players`` are ready (tables of 3-4)."""
        ...

    def arenas_up(self) -> dict[str, bool]:
        """Each arena: connected to the broker and serving."""
        ...

    def any_stopped(self) -> bool:
        """An arena stopped on its own (its journal cannot be written, a bug):
        the night cannot go on without the organiser."""
        ...


def ask(answer: Answer) -> Step[bool]:
    """``ok = yield from ask(referee.pause_game(...))``."""
    if isinstance(answer, bool):
        return answer
    return (yield answer)


def now(step: Step[T]) -> T:
    """Drive ``step`` to its end on this thread, waiting for each answer."""
    sent: bool | None = None
    while True:
        try:
            asked = step.send(sent)  # type: ignore[arg-type]  # (the first send is None, as generators take)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if isinstance(asked, bool):
            sent = asked
            continue
        sent = answer(asked, ANSWER_WAIT_S)


class Runner:
    """Drives the director's steps on ``loop``, one at a time: :attr:`busy`
    while one waits for an answer."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.busy = False

    def start(self, step: Step[Any], done: Callable[[Any, Exception | None], None]) -> None:
        """On the loop's thread: run ``step``; ``done(value, error)`` at its end."""
        assert not self.busy, "one step at a time"
        self._drive(step, None, done)

    def _drive(self, step: Step[Any], sent: bool | None, done: Callable[[Any, Exception | None], None]) -> None:
        while True:
            try:
                asked = step.send(sent)  # type: ignore[arg-type]  # (None first)
            except StopIteration as stop:
                self.busy = False
                done(stop.value, None)
                return
            except Exception as exc:
                self.busy = False
                done(None, exc)
                return
            if isinstance(asked, bool):
                sent = asked
                continue
            self.busy = True
            self._wait(asked, step, done)
            return

    def _wait(self, asked: Future[bool], step: Step[Any], done: Callable[[Any, Exception | None], None]) -> None:
        resumed = False

        def resume(answer: bool) -> None:  # on the loop's thread, once
            nonlocal resumed
            if resumed:
                return
            resumed = True
            timer.cancel()
            self._drive(step, answer, done)

        def answered(future: Future[bool]) -> None:  # on whichever thread resolved it
            ok = not future.cancelled() and future.exception() is None and bool(future.result())
            self.loop.call_soon_threadsafe(resume, ok)

        timer = self.loop.call_later(ANSWER_WAIT_S, resume, False)
        asked.add_done_callback(answered)
