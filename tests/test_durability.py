"""Nothing acknowledged is lost, without a broker: the state file under a
full disk, a vanished or replaced file, a backup, what a restarted referee
publishes again, who may take an arena, placements delivered again, turns
given back the time the referee was cut off. The same faults injected into
real processes are in test_faults.py."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest
from nacl.public import PrivateKey

from salvo.arena.arena import Record
from salvo.arena.journal import Store
from salvo.arena.resume import make_arenas
from salvo.arena.statefile import StoreDamaged, StoreFailure, backup, set_aside
from salvo.game.events import Abandon, Config, Event, Extend, Phase, Place, Tick
from salvo.referee.ownership import FREE_PLAY, TOURNAMENT, Lease, Progress, Sighting, lag, verdict
from salvo.spec import crypto, payloads
from salvo.spec.rules import Orientation, Placement

from kit import COLUMNS, ROWS, ArenaDriver, Driver

CONFIG = Config(placement_timeout=60, turn_timeout=30, reset_after=100)


# -- the state file ---------------------------------------------------------------------


def full_database(store: Store) -> None:
    """Make SQLite's file unable to grow, as on a full disk (SQLITE_FULL)."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def ticks(n: int, start: float = 1.0) -> list[tuple[str, int, Event]]:
    return [("a", 1, Tick(start + i)) for i in range(n)]


def test_a_commit_that_fails_keeps_every_event_and_says_the_disk_is_full(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    full_database(store)
    store.record_many([("a", 1, Tick(0.5))])
    store.record_many([("a", 1, Tick(1.0 + i)) for i in range(400)])  # more than the file can take
    with pytest.raises(StoreFailure, match="the disk is full"):
        store.settle()
    assert store.pending == 401  # nothing dropped before it was written
    assert not store._db.in_transaction
    store.close()  # after a failure the spool is kept for the next start
    assert Path(f"{tmp_path / 'state.db'}-spool").stat().st_size > 0
    again = Store(tmp_path / "state.db")  # space freed: the next start takes the spool in
    assert again.events("a", 1) == [Tick(0.5), *(Tick(1.0 + i) for i in range(400))]
    again.close()


def test_a_spool_write_that_fails_is_a_store_failure_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "state.db")
    store.record_many(ticks(2))

    def no_space(_fd: int, _data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(StoreFailure, match=r"state.db-spool: the disk is full"):
        store.record_many(ticks(3, 10.0))
    monkeypatch.undo()
    assert store.pending == 2
    store.settle()
    assert store.events("a", 1) == [Tick(1.0), Tick(2.0)]
    store.close()


@pytest.mark.parametrize("how", ["deleted", "replaced", "spool deleted"])
def test_a_state_file_deleted_or_replaced_under_the_referee_is_noticed(tmp_path: Path, how: str) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.check_intact()
    if how == "deleted":
        path.unlink()
    elif how == "replaced":
        other = tmp_path / "other.db"
        other.write_bytes(path.read_bytes())
        os.replace(other, path)
    else:
        Path(f"{path}-spool").unlink()
    with pytest.raises(StoreFailure, match="deleted or replaced"):
        store.check_intact()
    store.close()


def test_a_state_file_emptied_under_the_referee_is_noticed_and_refused_at_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    store.checkpoint()  # the tables in the file itself, as after any start
    store.record_many(ticks(3))
    os.truncate(path, 0)
    with pytest.raises(StoreDamaged, match="empty"):
        store.check_intact()
    store.close()  # the spool, which holds the events, is kept
    with pytest.raises(StoreDamaged, match=str(path)):
        Store(path)
    assert Path(f"{path}-spool").stat().st_size > 0


@pytest.mark.parametrize("content", [b"", b"garbage" * 100])
def test_a_damaged_state_file_is_refused_and_can_only_be_set_aside(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.record_many(ticks(2))
    store.settle()
    store.close()
    Path(f"{path}-spool").write_bytes(b'1\t"a"\t1\t-\t{}\n')  # something a referee left
    path.write_bytes(content)
    with pytest.raises(StoreDamaged, match=str(path)):
        Store(path)
    assert path.read_bytes() == content  # refused: untouched
    moved = set_aside(path, "T")
    assert sorted(p.name for p in moved) == ["state.db.damaged-T", "state.db.damaged-T-spool"]
    Store(path).close()  # a new one now


def test_a_lost_wal_loses_no_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool is emptied only after a checkpoint put its events into the
    file itself: the file and the spool together always hold every event."""
    monkeypatch.setattr("salvo.arena.journal.SPOOL_RESET_BYTES", 1)
    path = tmp_path / "state.db"
    store = Store(path)
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    store.record_many(ticks(3))
    store.settle()  # the spool is emptied here
    store.record_many(ticks(2, 10.0))  # only in the spool
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("state.db", "state.db-spool"):  # a kill -9, then the -wal deleted
        (copy / name).write_bytes((tmp_path / name).read_bytes())
    store.close()
    again = Store(copy / "state.db")
    assert again.events("a", 1) == [Tick(1.0), Tick(2.0), Tick(3.0), Tick(10.0), Tick(11.0)]
    assert again.arena("a") is not None
    again.close()


def test_an_abandoned_game_is_journaled_and_replays(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (arena,) = make_arenas(["p"], CONFIG, 3, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena
    d.start({"alice": ROWS, "bob": COLUMNS})
    old = arena.game.game_id
    effects = arena.abandon("on purpose", 5.0)
    records = [e for e in effects if isinstance(e, Record)]
    assert [type(r.event) for r in records] == [Abandon] and arena.game.phase is Phase.LOBBY
    assert arena.game.game_id != old and not arena.game.players
    assert arena.abandon("again", 6.0) == []  # an untouched lobby stays as it is
    for event in [*d.records, *(r.event for r in records)]:
        store.record_many([("p", 1, event)])
    store.close()
    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    assert back.game.phase is Phase.LOBBY and back.game.game_id == arena.game.game_id
    again.close()


def test_a_backup_of_a_live_state_file_holds_every_event(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    store.record_many(ticks(3))
    store.settle()  # in SQLite (its WAL)
    store.record_many(ticks(2, 10.0))  # only spooled
    assert backup(path, tmp_path / "copy.db") == 3
    store.close()
    copy = Store(tmp_path / "copy.db")
    assert copy.events("a", 1) == [Tick(1.0), Tick(2.0), Tick(3.0), Tick(10.0), Tick(11.0)]
    assert copy.arena("a") is not None
    copy.close()


# -- a restart publishes what the broker never acknowledged ------------------------------------


def test_a_restarted_referee_publishes_again_what_was_never_acknowledged(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (arena,) = make_arenas(["p"], CONFIG, 3, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena  # drive the journaled arena
    for name in ("alice", "bob"):
        d.join(name)
    d.place("alice", ROWS)
    d.place("bob", COLUMNS)
    last = 0
    for event in d.records:
        last = store.record_many([("p", 1, event)])
    store.mark_published("p", last)  # everything so far reached the broker
    published = list(d.published)
    me = d.game.current
    assert me is not None
    target = "bob" if me == "alice" else "alice"
    d.records.clear()
    out = d.fire(me, target, 9, 9) + d.fire(me, target, 8, 9)
    for event in d.records:
        store.record_many([("p", 1, event)])  # journaled, then the referee died: never acknowledged
    store.close()

    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    assert back.backlog == out and back.backlog_to == last + 2
    assert all(p not in back.backlog for p in published if not p.retain)
    assert back.game.snapshot() == d.game.snapshot()
    again.close()


def test_what_is_published_again_never_sends_a_retained_topic_back_in_time(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (arena,) = make_arenas(["p"], CONFIG, 3, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena
    for name in ("alice", "bob"):
        d.join(name)
    for event in d.records:
        store.record_many([("p", 1, event)])  # both joins journaled, neither published
    store.close()

    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    lists = [p.payload for p in back.backlog if p.topic.endswith("/players/list")]
    assert lists == ['["alice","bob"]']  # not ["alice"] first: the lobby never shrinks
    again.close()


def journaled_game_under_way(tmp_path: Path) -> tuple[Store, PrivateKey, ArenaDriver]:
    """A journaled arena whose game is at its first turn, all of it
    journaled and acknowledged by the broker (its records then cleared)."""
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (arena,) = make_arenas(["p"], CONFIG, 3, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena
    for name in ("alice", "bob"):
        d.join(name)
    d.place("alice", ROWS)
    d.place("bob", COLUMNS)
    store.mark_published("p", store.record_many([("p", 1, event) for event in d.records]))
    d.records.clear()
    return store, key, d


def test_a_refusal_the_broker_never_acknowledged_is_told_after_a_restart(tmp_path: Path) -> None:
    """A refused shot spends its signature (journaled); killed before the
    report went out, the redelivered message is then `replayed`: so the
    report itself comes from the journal, with its real code."""
    store, key, d = journaled_game_under_way(tmp_path)
    me = d.game.current
    assert me is not None
    other = "bob" if me == "alice" else "alice"
    out = d.send(d.t.fire(me), d.signed_fire(other, me, 1, 1))  # out of turn: refused, its nonce spent
    (told,) = [p for p in out if p.topic == d.t.player_error(other)]
    store.record_many([("p", 1, event) for event in d.records])  # the burn journaled; then killed
    store.close()

    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    assert [(p.topic, json.loads(p.payload)) for p in back.backlog] == [(told.topic, json.loads(told.payload))]
    assert json.loads(told.payload)["code"] == "not_current_player"
    assert json.loads(told.payload)["shot"] == {"target": me, "x": 1, "y": 1}  # (v2.1) after a restart too
    again.close()


def test_only_the_last_salvos_hit_count_is_published_again_and_with_its_salvo(tmp_path: Path) -> None:
    """/game/hits carries no turn: after a restart that publishes several
    salvos again, only the count that goes with the retained /game/salvo
    kept goes out (the review saw earlier counts arrive out of place)."""
    store, key, d = journaled_game_under_way(tmp_path)
    for _ in range(3):  # three whole salvos journaled, none acknowledged
        me = d.game.current
        assert me is not None
        target = "bob" if me == "alice" else "alice"
        for _shot in range(d.game.allowed):
            d.fire(me, target, _shot, 9)
    store.record_many([("p", 1, event) for event in d.records])
    store.close()

    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    topics = [p.topic for p in back.backlog]
    assert topics.count(d.t.hits) == 1 and topics.count(d.t.salvo) == 1
    assert topics.index(d.t.hits) < topics.index(d.t.salvo)  # in its place: right before its salvo
    (salvo,) = [p for p in back.backlog if p.topic == d.t.salvo]
    (hits,) = [p for p in back.backlog if p.topic == d.t.hits]
    assert json.loads(salvo.payload)["turn"] == 3 and json.loads(salvo.payload)["hits"] == int(hits.payload)
    again.close()


# -- who may take an arena -------------------------------------------------------------------


MINE = Lease("aaaa", 1.0, "here")
THEIRS = Lease("bbbb", 2.0, "there")
FREE_PLAYS = Lease("cccc", 3.0, "there", FREE_PLAY)


@pytest.mark.parametrize(
    ("seen", "allowed"),
    [
        (Sighting(), True),  # a broker that holds nothing
        (Sighting(server="down", lease=THEIRS, state="turn", game_id="g1", players=["a", "b"]), True),
        (Sighting(server="up", lease=THEIRS, state="lobby", game_id="g1"), False),  # a live referee
        (Sighting(server="up", lease=None, state="lobby"), False),  # a live referee of an older version
        (Sighting(server="up", lease=MINE, state="turn", game_id="g1", players=["a"]), True),  # my last run
        (Sighting(server="down", state="turn", game_id="zz", players=["a", "b"]), False),  # a game I do not hold
        (Sighting(server="down", state="over", game_id="zz"), True),  # a finished game, its referee gone
        (Sighting(server=None, state="over", game_id="zz"), True),  # ... or never said (an older referee)
        (Sighting(server="up", lease=THEIRS, state="over", game_id="zz"), False),  # ... but not while it is up
        (Sighting(server="down", state="lobby", game_id="zz", players=["a"]), False),  # somebody joined
        (Sighting(server="down", state="lobby", game_id="zz", players=[]), True),  # an empty lobby
        (Sighting(server="down", state="over", game_id="g0"), True),  # my previous game: the reset is to come
        (Sighting(server="down", state="turn", game_id="g0", players=["a"]), True),  # ... whatever its state
        # free play's game in progress: a free-play referee never ends it without --fresh (a lost state file?)
        (Sighting(server="down", lease=FREE_PLAYS, state="turn", game_id="zz", players=["a", "b"]), False),
    ],
)
def test_who_may_take_an_arena(seen: Sighting, allowed: bool) -> None:
    why = verdict("p", seen, last_lease=MINE, game_id="g1", earlier_ids={"g0"}, has_events=True, fresh=False)
    assert (why is None) == allowed, why


def test_the_tournament_ends_a_free_play_game_and_nothing_else_without_fresh() -> None:
    playing = Sighting(server="down", lease=FREE_PLAYS, state="turn", game_id="zz", players=["a", "b"])
    assert verdict("p", playing, last_lease=None, game_id="g1", has_events=False, fresh=False, role=TOURNAMENT) is None
    tournament_game = Sighting(
        server="down", lease=Lease("dddd", 4.0, "there", TOURNAMENT), state="turn", game_id="zz", players=["a", "b"]
    )
    why = verdict("p", tournament_game, last_lease=None, game_id="g1", has_events=False, fresh=False, role=TOURNAMENT)
    assert why is not None and "by a tournament referee" in why and "SALVO_FRESH=1" in why
    # a live free-play referee is never taken over, whoever asks
    live = Sighting(server="up", lease=FREE_PLAYS, state="turn", game_id="zz", players=["a", "b"])
    assert verdict("p", live, last_lease=None, game_id="g1", has_events=False, fresh=True, role=TOURNAMENT) is not None
    assert Lease.parse(FREE_PLAYS.text()) == FREE_PLAYS and Lease.parse(MINE.text()) == MINE


def test_a_foreign_game_is_taken_only_on_purpose_and_a_live_referee_never() -> None:
    foreign = Sighting(server="down", state="turn", game_id="zz", players=["a", "b"])
    why = verdict("p", foreign, last_lease=None, game_id="g1", has_events=False, fresh=False)
    assert why is not None and "--fresh" in why and "zz" in why
    assert verdict("p", foreign, last_lease=None, game_id="g1", has_events=False, fresh=True) is None
    live = Sighting(server="up", lease=THEIRS)
    assert verdict("p", live, last_lease=MINE, game_id="g1", has_events=True, fresh=True) is not None
    # a referee from before game ids left no /game/id: the game is this state file's own
    v1 = Sighting(server="down", state="turn", players=["a", "b"])
    assert verdict("p", v1, last_lease=None, game_id="g1", has_events=True, fresh=False) is None
    assert Lease.parse(MINE.text()) == MINE and Lease.parse("nonsense") is None


# -- placements delivered again, and time given back ----------------------------------------------


def test_a_placement_delivered_again_is_ignored_in_silence_even_after_the_start() -> None:
    d = ArenaDriver()
    d.join("alice")
    d.join("bob")
    sealed = crypto.seal(d.key("alice"), payloads.placement(Placement(0, 0, Orientation.HORIZONTAL)))
    assert [p.topic for p in d.send(d.t.place("alice", "carrier"), sealed)] == [d.t.approved("alice", "carrier")]
    assert d.send(d.t.place("alice", "carrier"), sealed) == []  # delivered again: nothing, no error
    rest = {s: p for s, p in ROWS.items() if s != "carrier"}
    d.place("alice", rest)
    d.place("bob", COLUMNS)
    assert d.game.phase is Phase.TURN
    assert d.send(d.t.place("alice", "carrier"), sealed) == []  # not "not in the lobby"
    records = list(d.records)
    assert sum(isinstance(r, Place) and r.ship == "carrier" and r.name == "alice" for r in records) == 1


def test_the_time_the_referee_was_cut_off_is_given_back_to_the_turn() -> None:
    d = Driver(turn_timeout=30)
    d.start({"a": ROWS, "b": COLUMNS})
    deadline = d.game.next_deadline()
    assert deadline is not None
    out = d.ok(Extend(4.5, d.now))
    assert d.game.next_deadline() == pytest.approx(deadline + 4.5)
    assert [json.loads(p.payload) for p in out] == [{"phase": "turn", "at": round(deadline + 4.5, 3)}]
    d.tick(30)  # the old deadline passes: the turn goes on
    assert d.game.turn == 1
    d.tick(4.5)
    assert d.game.turn == 2
    d2 = Driver()
    assert d2.ok(Extend(3.0, d2.now)) == []  # nothing running: nothing to extend


def test_an_extension_is_journaled_like_every_event(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (arena,) = make_arenas(["p"], CONFIG, 3, key, store)
    d = ArenaDriver(prefix="p")
    d.game, d.arena = arena.game, arena
    d.join("alice")
    effects = arena.extend(2.0, d.now)
    (record,) = [e for e in effects if isinstance(e, Record)]
    assert record.event == Extend(2.0, d.now)
    for event in [*d.records, record.event]:  # as the referee journals them
        store.record("p", 1, event)
    store.close()
    again = Store(tmp_path / "state.db")
    (back,) = make_arenas(["p"], CONFIG, 3, key, again)
    assert back.game.next_deadline() == pytest.approx(d.now + CONFIG.placement_timeout + 2.0)
    again.close()


# -- a journal behind the broker, a copy of the state file ------------------------------------------


def progress(state: str = "turn", turn: int = 2, fallen: frozenset[str] = frozenset()) -> Progress:
    return Progress(state, turn, fallen, frozenset({"a", "b"}))


@pytest.mark.parametrize(
    ("seen", "why", "journal"),
    [
        (Sighting(state="turn", turn=2), None, progress()),  # where the journal is
        (Sighting(state="turn", turn=1), None, progress()),  # the journal ahead: its backlog publishes the rest
        (Sighting(state="lobby"), None, progress()),
        (Sighting(state="turn", turn=6), "the broker shows turn 6, this journal ends at turn 2", progress()),
        (Sighting(state="over", turn=2), "the broker shows turn 2, this journal ends at turn 2", progress()),
        (Sighting(state="turn", turn=2, fallen={"/p/players/a/ships/carrier/sunk"}), "1 sunk ship(s)", progress()),
        (Sighting(state="turn", turn=2, fallen={"/p/players/a/defeated"}), "1 sunk ship(s) or defeat(s)", progress()),
        # a sink of somebody not in this game: stale (the sweep clears it), not a sign of a backup
        (Sighting(state="turn", turn=2, fallen={"/p/players/zed/ships/carrier/sunk"}), None, progress()),
        # a reset cut short by kill -9 after the new id, before "lobby": the
        # game before's "over", its /game/turn already cleared (test_faults[reset])
        (Sighting(state="over"), None, progress("lobby", 0)),
        # this game's own end, which a lobby backup does not hold: its turn is still shown
        (
            Sighting(state="over", turn=9),
            "the broker shows turn 9, this journal ends at state lobby",
            progress("lobby", 0),
        ),
        (Sighting(state="turn"), "the broker shows state turn, this journal ends at state lobby", progress("lobby", 0)),
    ],
)
def test_a_journal_behind_what_the_broker_shows_is_told_apart(
    seen: Sighting, why: str | None, journal: Progress
) -> None:
    found = lag(seen, journal)
    assert (found is None) if why is None else (found is not None and why in found), found


def test_a_journal_behind_the_broker_refuses_to_start_and_says_how_far() -> None:
    seen = Sighting(server="down", lease=MINE, state="turn", game_id="g1", players=["a", "b"], turn=6)
    behind = lag(seen, progress(turn=2))
    why = verdict(
        "p", seen, last_lease=MINE, game_id="g1", has_events=True, fresh=False, behind=behind, state_file="state.db"
    )
    assert why is not None
    assert "the broker shows turn 6, this journal ends at turn 2" in why and "state.db is behind" in why
    assert "newest state file" in why and "--fresh" in why  # the way forward, named
    # --fresh ends that game on purpose (claim then abandons it rather than resume it: test_store)
    assert verdict("p", seen, last_lease=MINE, game_id="g1", has_events=True, fresh=True, behind=behind) is None


def test_a_journal_games_behind_the_broker_is_refused_even_with_fresh() -> None:
    seen = Sighting(server="down", lease=MINE, state="turn", game_id="g9", players=["a", "b"], turn=3)
    for fresh in (False, True):
        why = verdict("p", seen, last_lease=MINE, game_id="g7", has_events=True, fresh=fresh, later_game=2)
        assert why is not None and "2 game(s) after" in why and "new state file" in why


def test_a_copied_lease_is_never_taken_for_ones_own_previous_run() -> None:
    """A copy of the live state file (another machine, a restored backup)
    carries the live referee's lease, but not the file it was taken with."""
    live = Lease("aaaa", 1.0, "here", gen=3, run="file-one")
    seen = Sighting(server="up", lease=live, state="turn", game_id="g1", players=["a", "b"], turn=4)

    def check(seen: Sighting, last: Lease, run: str) -> str | None:
        return verdict("p", seen, last_lease=last, game_id="g1", has_events=True, fresh=False, run=run)

    assert check(seen, live, "file-one") is None  # my own run, killed: take it back
    why = check(seen, live, "file-two")  # the same lease, from a copy
    assert why is not None and "another referee holds it and is up" in why
    older = Lease("aaaa", 1.0, "here")  # a lease from before run identities: as before
    assert check(Sighting(server="up", lease=older), older, "file-two") is None


def test_a_copy_of_a_state_file_is_another_run_and_a_rename_is_not(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    first = store.run_identity
    store.close()
    reopened = Store(path)
    assert reopened.run_identity == first  # reopened: the same file
    reopened.close()
    moved = tmp_path / "moved.db"
    os.rename(path, moved)
    again = Store(moved)
    assert again.run_identity == first  # moved on the same disk: still that file
    again.close()
    copy = tmp_path / "copy.db"
    assert backup(moved, copy) >= 0
    other = Store(copy)
    assert other.run_identity != first
    other.close()


@pytest.mark.parametrize("how", ["deleted", "replaced", "spool deleted", "emptied"])
def test_nothing_is_journaled_into_a_file_a_restart_would_not_read(tmp_path: Path, how: str) -> None:
    """The review saw a referee publish up to 10 hits journaled into a
    deleted file, in the second before its check: now the write itself
    says so, and the batch's results never go out (StoreFailure)."""
    path = tmp_path / "state.db"
    store = Store(path)
    store.record_many(ticks(1))
    if how == "deleted":
        path.unlink()
    elif how == "replaced":
        other = tmp_path / "other.db"
        other.write_bytes(path.read_bytes())
        os.replace(other, path)
    elif how == "emptied":
        os.truncate(path, 0)
    else:
        Path(f"{path}-spool").unlink()
    with pytest.raises(StoreFailure, match="stopping before anything more is published"):
        store.record_many(ticks(1, 5.0))
    store.close()


def test_a_spool_taken_in_while_a_reader_holds_the_file_is_kept_and_counted(tmp_path: Path) -> None:
    """A killed referee's spool is taken in at start; while a reader (an
    export) holds the file the checkpoint cannot finish, so the spool is
    kept, and its size counts towards emptying it later."""
    path = tmp_path / "state.db"
    store = Store(path)
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    store.record_many(ticks(3))
    spool = Path(f"{path}-spool").read_bytes()
    os.close(store._spool)  # killed: nothing settled, the lock gone with the process
    store._db.close()
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM events").fetchone()  # a read transaction, held
    try:
        again = Store(path)
        assert again._spool_bytes == len(spool) > 0
        assert again.events("a", 1) == [Tick(1.0), Tick(2.0), Tick(3.0)]
        again.close()
    finally:
        reader.close()
