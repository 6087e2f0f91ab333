"""The generic event loop (salvo.net.loop), without a broker: readers and
writers by descriptor (numbers past 1024 too), timers, hand-overs from other
threads, idle callbacks, errors, stop, and a busy pass that cannot starve a
stop or a descriptor."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from salvo.net.loop import Loop, answer


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.close()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_a_reader_runs_while_its_descriptor_is_readable_and_not_once_removed(
    loop: Loop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    got: list[bytes] = []
    loop.add_reader(a, lambda: got.append(a.recv(100)))
    loop.run_once(0)
    assert got == []  # nothing to read: not called
    b.send(b"x")
    loop.run_once(1)
    assert got == [b"x"]
    loop.remove_reader(a)
    b.send(b"y")
    loop.run_once(0)
    assert got == [b"x"]
    loop.remove_reader(a)  # removing twice is harmless


def test_a_writer_runs_while_writable_and_shares_the_descriptor_with_a_reader(
    loop: Loop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    calls: list[str] = []

    def read() -> None:
        calls.append("read")
        a.recv(100)

    loop.add_reader(a.fileno(), read)
    loop.add_writer(a.fileno(), lambda: calls.append("write"))
    loop.run_once(1)
    assert calls == ["write"]
    loop.remove_writer(a.fileno())
    b.send(b"x")
    loop.run_once(1)
    assert calls == ["write", "read"]  # the reader stayed


def test_descriptors_numbered_past_1024_are_watched(loop: Loop) -> None:
    """What select() cannot do, and a thousand arenas need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip("the open file limit is below 1200")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held: list[socket.socket] = []
    try:
        while not held or held[-2].fileno() <= 1024:
            held += socket.socketpair()
        a, b = held[-2], held[-1]
        assert a.fileno() > 1024
        got: list[bytes] = []
        loop.add_reader(a, lambda: got.append(a.recv(10)))
        b.send(b"z")
        loop.run_once(1)
        assert got == [b"z"]
        loop.remove_reader(a)
    finally:
        for s in held:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_timers_run_in_order_when_due_and_a_cancelled_one_never() -> None:
    clock = FakeTime()
    loop = Loop(clock=clock)
    ran: list[str] = []
    loop.call_later(2.0, ran.append, "b")
    loop.call_at(clock.now + 1.0, ran.append, "a")
    dropped = loop.call_later(1.5, ran.append, "never")
    dropped.cancel()
    loop.run_once(0)
    assert ran == []  # none due yet
    clock.now += 1.0
    loop.run_once(0)
    assert ran == ["a"]
    clock.now += 5.0
    loop.run_once(0)
    assert ran == ["a", "b"]
    loop.close()


def test_a_timer_cancelled_by_an_earlier_callback_of_the_same_pass_does_not_run() -> None:
    clock = FakeTime()
    loop = Loop(clock=clock)
    ran: list[str] = []
    second = loop.call_later(1.0, ran.append, "second")

    def first() -> None:
        ran.append("first")
        second.cancel()

    loop.call_later(0.5, first)
    clock.now += 2.0
    loop.run_once(0)
    assert ran == ["first"]
    loop.close()


def test_many_cancelled_timers_do_not_pile_up(loop: Loop) -> None:
    kept = loop.call_later(1000.0, lambda: None)
    for _ in range(10_000):
        loop.call_later(1000.0, lambda: None).cancel()
    assert len(loop._timers) < 200  # compacted as it goes
    assert not kept.cancelled and any(t[2] is kept for t in loop._timers)


def test_the_wait_is_as_long_as_the_next_timer_and_no_longer(loop: Loop) -> None:
    done = threading.Event()
    loop.call_later(0.05, done.set)
    loop.run_once(None)  # would block forever without the timer
    assert done.is_set()


def test_a_callback_from_another_thread_wakes_the_loop_and_stop_ends_it(loop: Loop) -> None:
    seen: list[str] = []
    ran = threading.Event()
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()

    def handed_over() -> None:
        seen.append(threading.current_thread().name)
        ran.set()

    loop.call_soon_threadsafe(handed_over)
    assert ran.wait(5), "the hand-over did not wake the loop"
    assert seen == [thread.name]
    loop.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_a_stop_asked_for_before_run_is_not_lost(loop: Loop) -> None:
    loop.stop()
    # run() must return at once: in a thread, so a lost stop fails the test
    # instead of hanging the suite.
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    runner.join(5)
    assert not runner.is_alive(), "the stop asked for before run() was lost"
    loop.stop()  # (a lost one: let the thread end)


def test_idle_callbacks_run_once_and_only_when_nothing_is_to_be_read(
    loop: Loop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    idle: list[int] = []

    def settle() -> None:
        idle.append(1)

    loop.add_reader(a, lambda: a.recv(100))
    loop.call_when_idle(settle)
    loop.call_when_idle(settle)  # once, however often asked
    b.send(b"busy")
    loop.run_once(0)
    assert idle == []  # something was read: not idle
    loop.run_once(0)
    assert idle == [1]
    loop.run_once(0)
    assert idle == [1]


def test_a_failing_callback_goes_to_on_error_and_the_loop_goes_on() -> None:
    errors: list[Exception] = []
    loop = Loop(on_error=errors.append)
    ran: list[int] = []
    loop.call_soon(lambda: 1 / 0)
    loop.call_soon(ran.append, 1)
    loop.run_once(0)
    assert ran == [1] and len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)
    loop.close()


def test_a_busy_pass_yields_to_timers_and_hand_overs_and_starves_no_descriptor() -> None:
    clock = FakeTime()
    loop = Loop(clock=clock, io_slice_s=0.05)
    pairs = [socket.socketpair() for _ in range(6)]
    served: list[int] = []
    try:
        for i, (a, b) in enumerate(pairs):

            def slow(i: int = i) -> None:
                served.append(i)
                clock.now += 0.03  # each read takes 30 ms of the loop's time

            loop.add_reader(a, slow)
            b.send(b"x")  # stays readable: never drained
        stopped: list[bool] = []
        loop.call_soon_threadsafe(stopped.append, True)
        loop.run_once(0)
        assert len(served) == 2 and stopped == [True]  # the hand-over ran after 2 reads, not 6
        for _ in range(2):
            loop.run_once(0)
        assert sorted(served) == list(range(6))  # every descriptor had its turn
    finally:
        loop.close()
        for a, b in pairs:
            a.close()
            b.close()


def test_a_closed_descriptor_left_registered_does_not_block_its_number_being_reused(loop: Loop) -> None:
    a, b = socket.socketpair()
    number = a.fileno()
    loop.add_reader(number, lambda: None)
    a.close()  # without remove_reader: epoll forgets it, the loop does not know
    b.close()
    with contextlib.ExitStack() as stack:
        c, d = socket.socketpair()
        stack.callback(c.close)
        stack.callback(d.close)
        if c.fileno() != number:
            pytest.skip("the descriptor number was not reused")
        got: list[bytes] = []
        loop.add_writer(c, lambda: None)
        loop.add_reader(c, lambda: got.append(c.recv(10)))
        d.send(b"r")
        loop.run_once(1)
        assert got == [b"r"]


def test_what_arrives_during_idle_callbacks_is_read_before_a_timer_runs(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """An idle callback (the journal's commit) takes time; a message that
    arrived meanwhile was sent before a timer that fell due meanwhile."""
    clock = FakeTime()
    loop = Loop(clock=clock)
    a, b = pair
    order: list[str] = []
    loop.add_reader(a, lambda: order.append(f"read {a.recv(10).decode()}"))
    loop.call_later(1.0, order.append, "timer")

    def slow_commit() -> None:
        b.send(b"shot")  # arrives meanwhile
        clock.now += 2.0  # the timer is due when it is done

    loop.call_when_idle(slow_commit)
    for _ in range(3):
        loop.run_once(0)
    assert order == ["read shot", "timer"]
    loop.close()


def test_an_answer_is_the_futures_value_and_silence_is_false(loop: Loop) -> None:
    """The one wait on a yes/no handed back by the loop (steps.now, the tests'
    blocking controls): its value when it comes, False when it does not,
    and a failure is not mistaken for either."""
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yes: Future[bool] = Future()
        loop.call_soon_threadsafe(yes.set_result, True)
        assert answer(yes, 5.0) is True
        no: Future[bool] = Future()
        loop.call_soon_threadsafe(no.set_result, False)
        assert answer(no, 5.0) is False
        assert answer(Future(), 0.01) is False  # never answered
        failed: Future[bool] = Future()
        loop.call_soon_threadsafe(failed.set_exception, KeyError("no such arena"))
        with pytest.raises(KeyError):
            answer(failed, 5.0)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
