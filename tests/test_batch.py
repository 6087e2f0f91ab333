"""The order docs/reliability.md section 1 promises, without a broker: an
arena's batch (salvo.referee.batch) driven through an in-memory transport
(transport_fake.py) over a real state file. Journal, then publish, then
acknowledge; the published mark moves only with PUBACKs, in order; a
restart's backlog goes out again and is marked once the broker has it
all. Routing, the ACL and paho's own behaviour stay with the broker tests
(test_runner_loop.py, test_attacks.py, test_fencing.py)."""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

import pytest
from nacl.public import PrivateKey

from salvo.arena.arena import Arena, DeriveKey, Effect, Record
from salvo.arena.journal import Store
from salvo.arena.resume import make_arenas
from salvo.arena.statefile import StoreFailure
from salvo.game.events import Config, Tick
from salvo.referee.batch import BATCH_MAX, QOS0_BACKLOG, Batch, Dispatcher, KeyDone, Message
from salvo.referee.flood import BROKER_INFLIGHT, REPORTS_PER_S, LagClock
from salvo.spec import crypto
from salvo.spec.errors import Code, Illegal
from salvo.spec.payloads import Publish
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, ArenaDriver
from transport_fake import FakeTransport, Idle, RecordingJournal, Timeline

T = Topics("p")
STATE = Publish(T.state, "lobby", True)


class Rig:
    """One arena's batch and dispatcher over a fake transport and a real
    state file; key derivations wait until the test finishes them."""

    def __init__(self, tmp_path: Path, store: Store | None = None, arena: Arena | None = None) -> None:
        self.store = store if store is not None else Store(tmp_path / "state.db")
        if arena is None:
            (arena,) = make_arenas(["p"], Config(), 1, PrivateKey.generate(), self.store)
        self.arena = arena
        self.timeline: Timeline = []
        self.transport = FakeTransport(self.timeline)
        self.journal = RecordingJournal(self.store, self.timeline)
        self.idle = Idle()
        self.now = 1000.0
        self.jobs: list[DeriveKey] = []
        self.behind = 0
        self.batch = Batch("p", self.transport, self.journal, when_idle=self.idle, behind=self._behind)
        self.dispatcher = Dispatcher(arena, self.batch, clock=lambda: self.now, lag=LagClock(), derive=self.jobs.append)

    def _behind(self) -> None:
        self.behind += 1

    def message(self, mid: int, topic: str, payload: str | bytes) -> None:
        raw = payload.encode() if isinstance(payload, str) else payload
        self.dispatcher.dispatch(Message(topic, raw, mid, 1, False))

    def join(self, mid: int, name: str) -> None:
        self.message(mid, T.request_participation, json.dumps({"name": name, "secret": "s"}))

    def derived(self, job: DeriveKey, failure: Exception | None = None) -> None:
        """The pool finished ``job``: its KeyDone's turn in the inbox."""
        future: Future[bytes] = Future()
        if failure is None:
            future.set_result(crypto.derive_team_key(job.name, "s"))
        else:
            future.set_exception(failure)
        self.dispatcher.dispatch(KeyDone(job, future))

    def batch_of(self, effects: list[Effect], *acks: int) -> None:
        """One batch: these effects, these messages acknowledged."""
        self.dispatcher.apply(effects)
        for mid in acks:
            self.batch.ack(mid, 1)
        self.dispatcher.flush()

    def published_in_file(self) -> int:
        """The published mark as a restarted referee would read it (the file, not the store's memory)."""
        with sqlite3.connect(f"file:{self.store.path}?mode=ro", uri=True) as raw:
            return int(raw.execute("SELECT published FROM arenas WHERE prefix = 'p'").fetchone()[0])

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.timeline]


def ticks(*at: float) -> list[Effect]:
    return [Record(Tick(t), 1) for t in at]


# -- journal, then publish, then acknowledge ------------------------------------------------


def test_nothing_is_published_before_its_events_are_spooled(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.batch_of([*ticks(5.0), STATE], 7)
    assert rig.timeline[:2] == [("spool", 1), ("publish", T.state)]
    # a join: its results go out only once the join (with its key) is in the spool
    rig.join(8, "ann")
    rig.batch.flush()
    rig.derived(rig.jobs[0])
    del rig.timeline[:]
    rig.batch.flush()
    first_publish = rig.kinds().index("publish")
    assert rig.kinds()[:first_publish] == ["spool"]
    assert T.players_list in rig.transport.topics
    # what was spooled is in the spool file, not only in memory
    assert Path(f"{rig.store.path}-spool").read_bytes().count(b"\n") == 2
    rig.store.close()


def test_no_message_is_acknowledged_before_its_batchs_results_are_written(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.batch_of([*ticks(5.0), STATE, Publish(T.players_list, "[]", True)], 7, 8)
    assert rig.timeline == [
        ("spool", 1),
        ("publish", T.state),
        ("publish", T.players_list),
        ("write", None),  # on the wire...
        ("ack", 7),  # ...before the acks
        ("ack", 8),
    ]
    # the SQLite commit waits for an idle loop, after the acks
    assert rig.store.pending == 1
    rig.idle.run()
    assert rig.timeline[-1] == ("settle", None) and rig.store.pending == 0
    rig.store.close()


def test_a_store_failure_publishes_and_acknowledges_nothing_of_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig(tmp_path)
    rig.batch_of([*ticks(5.0), STATE], 7)
    before = list(rig.timeline)

    def no_space(_fd: int, _data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)
    rig.dispatcher.apply([*ticks(6.0), Publish(T.players_list, "[]", True)])
    rig.batch.ack(8, 1)
    with pytest.raises(StoreFailure, match="the disk is full"):
        rig.batch.flush()
    monkeypatch.undo()
    assert rig.timeline == before  # not one publish, write or ack of that batch
    # the runner stops on a StoreFailure and drops the batch: it never goes out later
    rig.batch.drop()
    rig.batch.flush()
    assert rig.transport.topics == [T.state] and rig.transport.acked == [7]
    rig.store.close()


# -- the published mark ----------------------------------------------------------------------


def test_the_published_mark_follows_pubacks_in_order(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    for i, at in enumerate((1.0, 2.0, 3.0)):
        rig.batch_of([*ticks(at), Publish(T.state, f"s{i}", True)], i)
    first, second, third = rig.transport.sent
    rig.batch.note_published()
    assert "mark" not in rig.kinds()  # no PUBACK yet
    rig.transport.puback(second, third)
    rig.batch.note_published()
    assert "mark" not in rig.kinds()  # a later PUBACK does not mark an earlier batch's events
    rig.idle.run()
    assert rig.published_in_file() == 0
    rig.transport.puback(first)
    rig.batch.note_published()
    assert [e for e in rig.timeline if e[0] == "mark"] == [("mark", 3)]  # all three, at once
    rig.store.settle()
    assert rig.published_in_file() == 3
    rig.store.close()


def test_a_batch_without_publishes_is_marked_with_the_next_pubacks(tmp_path: Path) -> None:
    """A batch of events whose results say nothing (a tick in a lobby) is
    marked once everything before it is acknowledged."""
    rig = Rig(tmp_path)
    rig.batch_of([*ticks(1.0), STATE])
    rig.batch_of(ticks(2.0))
    rig.batch.note_published()
    assert "mark" not in rig.kinds()
    rig.transport.puback()
    rig.batch.note_published()
    assert [e for e in rig.timeline if e[0] == "mark"] == [("mark", 2)]
    rig.store.close()


# -- after a restart ---------------------------------------------------------------------------


def test_a_restarts_backlog_goes_out_first_and_is_marked_in_the_file_once_the_broker_has_it_all(
    tmp_path: Path,
) -> None:
    key, path = PrivateKey.generate(), tmp_path / "state.db"
    store = Store(path)
    (arena,) = make_arenas(["p"], Config(), 1, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena
    for name in ("alice", "bob"):
        d.join(name)
    last = max(store.record_many([("p", 1, event)]) for event in d.records)  # journaled, never published
    store.close()
    again = Store(path)
    (back,) = make_arenas(["p"], Config(), 1, key, again)
    assert back.backlog and back.backlog_to == last
    rig = Rig(tmp_path, again, back)
    backlog = list(back.backlog)
    # the end of the start-up sweep (ArenaRunner._end_sweep)
    rig.batch.republish(backlog, back.backlog_to)
    rig.dispatcher.apply(list(back.presence()))
    rig.batch.flush()
    assert [(r.topic, r.payload) for r in rig.transport.sent[: len(backlog)]] == [(p.topic, p.payload) for p in backlog]
    assert rig.transport.sent[-1].topic == T.server  # 'up' after all of it
    *most, final = rig.transport.sent  # (the batch's 'up' and state with it)
    rig.transport.puback(*most)
    rig.batch.note_published()
    rig.idle.run()
    assert rig.published_in_file() == 0  # not all of it: published again at the next start
    rig.transport.puback(final)
    rig.batch.note_published()
    # written when the loop is next idle, not with the next journaled event
    # (a join, minutes later: killed meanwhile, the backlog went out again)
    assert rig.published_in_file() == 0
    rig.idle.run()
    assert rig.published_in_file() == last
    again.close()
    # and a restart now has nothing to publish again
    (after,) = make_arenas(["p"], Config(), 1, key, Store(path))
    assert after.backlog == []


# -- floods and joins --------------------------------------------------------------------------


def test_a_flood_of_bad_messages_is_acknowledged_and_its_reports_capped_while_the_game_goes_out(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    flood = int(REPORTS_PER_S) + 60
    for mid in range(flood):
        rig.message(mid, T.request_participation, b"garbage")
    game = int(REPORTS_PER_S) + 10  # more of the game's own messages on one topic than a report budget
    rig.batch_of([Publish(T.hits, str(i), False) for i in range(game)])
    assert rig.transport.topics.count(T.errors) == REPORTS_PER_S
    assert rig.dispatcher.dropped_reports == 60
    assert rig.transport.topics.count(T.hits) == game  # the game's own messages are never capped
    assert rig.transport.acked == list(range(flood))  # a dropped report still acknowledges its message
    assert rig.behind == 1  # a whole in-flight window of the broker's acknowledged: the referee is behind
    assert flood >= BROKER_INFLIGHT
    rig.store.close()


def test_a_joins_acknowledgement_waits_until_its_key_derivation_is_journaled(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.join(5, "ann")
    rig.join(6, "ann")  # the same join again meanwhile: the same derivation, held too
    rig.message(7, T.request_participation, b"garbage")
    rig.batch.flush()
    assert rig.transport.acked == [7] and "spool" not in rig.kinds()
    (job,) = rig.jobs
    rig.derived(job)
    rig.batch.flush()
    join = rig.kinds().index("spool")
    assert rig.timeline.index(("ack", 5)) > join and rig.timeline.index(("ack", 6)) > join
    assert rig.transport.acked == [7, 5, 6]
    # a refused join (its secret wrong) is acknowledged with its refusal
    rig.join(9, "bob")
    rig.batch.flush()
    assert 9 not in rig.transport.acked
    rig.derived(rig.jobs[1], Illegal(Code.WRONG_SECRET, "wrong secret"))
    rig.batch.flush()
    assert rig.transport.acked[-1] == 9
    assert rig.timeline.index(("ack", 9)) > max(i for i, e in enumerate(rig.timeline) if e[0] == "publish")
    rig.store.close()


def test_a_qos0_flood_waits_behind_the_teams_and_is_dropped_beyond_its_cap(tmp_path: Path) -> None:
    """QoS 0 messages are at most once anyway: beyond QOS0_BACKLOG they are
    dropped, and they never delay a QoS 1 message or a control item."""
    rig = Rig(tmp_path)
    garbage = Message(T.request_participation, b"garbage", 0, 0, False)
    for _ in range(QOS0_BACKLOG + 10):
        rig.dispatcher.put_qos0(garbage)
    assert rig.dispatcher.dropped == 10
    rig.dispatcher.put(Message(T.request_participation, b"garbage", 42, 1, False))  # a team's, after the flood
    rig.dispatcher.work(lambda: False)
    assert rig.transport.acked == [42]  # first, in the first batch
    assert rig.transport.topics.count(T.errors) == BATCH_MAX  # one batch is BATCH_MAX items
    while rig.dispatcher.waiting:
        rig.dispatcher.work(lambda: False)
    assert rig.transport.acked == [42]  # QoS 0: nothing to acknowledge
    rig.store.close()


# -- log lines after the batch -------------------------------------------------------------


@contextmanager
def lines_in(timeline: Timeline) -> Iterator[None]:
    """The referee's log lines (INFO and up, as organisers run it) land in
    the timeline too, as ("log", line), where they were said."""

    class ToTimeline(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            timeline.append(("log", record.getMessage()))

    logger, handler = logging.getLogger("salvo.referee"), ToTimeline(logging.INFO)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def playing(rig: Rig) -> tuple[ArenaDriver, str, str]:
    """The rig's arena in a game's first turn: its driver, who shoots, at whom."""
    d = ArenaDriver(prefix="p")
    d.game, d.arena = rig.arena.game, rig.arena
    d.start({"alice": ROWS, "bob": COLUMNS})
    shooter = rig.arena.game.current or ""
    return d, shooter, "bob" if shooter == "alice" else "alice"


def said(timeline: Timeline) -> list[str]:
    return [str(line) for kind, line in timeline if kind == "log"]


def test_a_shots_log_line_is_said_after_its_hit_is_out_and_its_message_acknowledged(tmp_path: Path) -> None:
    """At INFO every accepted shot has a line: said after the batch is on
    the wire and acknowledged, so the hit does not wait for it; the batch's
    lines in the order they were made."""
    rig = Rig(tmp_path)
    d, shooter, target = playing(rig)
    with lines_in(rig.timeline):
        rig.message(6, T.request_participation, b"garbage")
        rig.message(7, T.fire(target), d.signed_fire(shooter, target, 0, 9))
        assert said(rig.timeline) == []  # nothing said while the batch is built
        rig.dispatcher.work(lambda: False)  # (the inbox is empty: just the flush)
    assert rig.kinds() == ["spool", "publish", "publish", "write", "ack", "ack", "log", "log"]
    assert rig.transport.topics == [T.errors, T.hit(target)] and rig.transport.acked == [6, 7]
    rejected, accepted = said(rig.timeline)
    assert rejected.startswith("[p] reject") and accepted.startswith(f"[p] accept fire {T.fire(target)}")
    rig.store.close()


def test_a_batchs_log_lines_are_said_when_its_flush_fails_or_it_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig(tmp_path)
    d, shooter, target = playing(rig)

    def disk_full(_entries: object) -> int:
        raise StoreFailure("the disk is full")

    with lines_in(rig.timeline):
        rig.message(7, T.fire(target), d.signed_fire(shooter, target, 0, 9))
        monkeypatch.setattr(rig.journal, "record_many", disk_full)
        with pytest.raises(StoreFailure):
            rig.dispatcher.flush()
        assert rig.transport.sent == [] and rig.transport.acked == []  # nothing of the batch went out...
        (accepted,) = said(rig.timeline)  # ...and its line is not lost
        assert accepted.startswith("[p] accept fire")
        # the runner stops and drops the batch under way: its lines are said too
        rig.message(8, T.request_participation, b"garbage")
        rig.dispatcher.drop()
        assert said(rig.timeline)[1].startswith("[p] reject")
        assert rig.transport.sent == [] and rig.transport.acked == []
    rig.store.close()
