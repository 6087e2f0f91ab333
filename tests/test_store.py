"""Persistence without a broker: a referee resumed from its state file at any
point is exactly the referee that was running."""

from __future__ import annotations

import json
import logging
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from nacl.public import PrivateKey

from salvo.arena import journalformat
from salvo.arena.arena import Arena
from salvo.arena.journal import Store
from salvo.arena.journalformat import config_from_json, config_to_json, event_from_json, event_text, event_to_json
from salvo.arena.resume import make_arenas
from salvo.arena.statefile import StateInUse
from salvo.cli import ExitCode, main
from salvo.game.engine import Game
from salvo.game.events import (
    Abandon,
    Accepted,
    Burn,
    CloseLobby,
    Config,
    Configure,
    Event,
    Extend,
    Fire,
    Join,
    Phase,
    Place,
    Result,
    Tick,
)
from salvo.game.identity import KEYED_DRAW, draw_for
from salvo.referee.batch import Batch
from salvo.spec.codec import dumps
from salvo.spec.payloads import Publish
from salvo.spec.rules import Orientation, Placement
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, Driver, all_cells
from transport_fake import FakeReceipt, FakeTransport, Idle

CONFIG = Config(placement_timeout=60, turn_timeout=30, reset_after=100)


class RecordingDriver(Driver):
    """Drives a store-backed arena and journals what the engine accepts, as
    the referee does (Record effects come before the publishes)."""

    def __init__(self, store: Store, arena: Arena, prefix: str) -> None:
        super().__init__()
        self.game = arena.game
        self.store, self.prefix = store, prefix
        self.checks = 0

    def send(self, event: Event) -> Result:
        game_no = self.game.game_no
        result = super().send(event)
        if isinstance(result, Accepted):
            self.store.record(self.prefix, game_no, event)
        return result


def resumed(store: Store, prefix: str, key: PrivateKey, config: Config = CONFIG) -> Arena:
    (arena,) = make_arenas([prefix], config, None, key, store)
    return arena


def recording(tmp_path: Path, prefix: str, seed: int | None) -> tuple[Store, PrivateKey, RecordingDriver]:
    """A new state file with one new arena in it, driven and journaled."""
    store = Store(tmp_path / "state.db")
    key = PrivateKey.generate()
    (live,) = make_arenas([prefix], CONFIG, seed, key, store)
    return store, key, RecordingDriver(store, live, prefix)


def test_resume_at_every_event_equals_the_running_referee(tmp_path: Path) -> None:
    store, key, d = recording(tmp_path, "a", 11)
    snapshots = 0

    def check() -> None:
        nonlocal snapshots
        assert resumed(store, "a", key).game.snapshot() == d.game.snapshot()
        snapshots += 1

    d.join("alice", "bob")
    check()
    d.place("alice", ROWS)
    check()
    d.place("bob", COLUMNS)
    check()
    winner = d.cur
    loser = "bob" if winner == "alice" else "alice"
    targets = all_cells(d.fleets[loser])
    while d.game.phase is Phase.TURN:
        if d.cur == winner:
            n = d.game.allowed
            batch, targets = targets[:n], targets[n:]
            for target, x, y in [(loser, x, y) for x, y in batch] + d.misses(loser, n - len(batch)):
                check()  # before every shot: all the mid-salvo states
                d.fire(target, x, y)
        else:
            d.idle_turn()
        check()  # right after a salvo's end
    assert d.game.phase is Phase.OVER
    check()  # during over
    d.tick(101)  # reset: a new game in the lobby
    assert d.game.game_no == 2
    check()
    d.join("carol", "dave")
    check()
    assert snapshots > 30


def test_this_games_spent_signatures_survive_a_restart(tmp_path: Path) -> None:
    store, key, d = recording(tmp_path, "", 3)
    d.start({"alice": ROWS, "bob": COLUMNS})
    shot, burned = b"n" * 24, b"b" * 24
    me, other = d.cur, "bob" if d.cur == "alice" else "alice"
    d.ok(Fire(me, other, 9, 9, None, None, shot, d.now))
    d.ok(Burn(other, burned, d.now))
    again = resumed(store, "", key)
    assert again.game.nonce_seen(me, shot) == other and again.game.nonce_seen(other, burned) is False
    assert again.game.game_id == d.game.game_id  # the id key is in the state file


def _old_state_file(path: Path, events_schema: str) -> sqlite3.Connection:
    """A state file as an earlier version wrote it: its arenas table and the given events schema."""
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE arenas (prefix TEXT PRIMARY KEY, seed TEXT NOT NULL, config TEXT NOT NULL);" + events_schema
    )
    return old


def test_a_state_file_from_before_the_nonce_column_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = _old_state_file(
        path,
        """
        CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, arena TEXT NOT NULL,
                             game INTEGER NOT NULL, event TEXT NOT NULL);
        CREATE TABLE nonces (arena TEXT NOT NULL, nonce BLOB NOT NULL, game INTEGER NOT NULL,
                             PRIMARY KEY (arena, nonce)) WITHOUT ROWID;
        """,
    )
    old.execute("INSERT INTO nonces VALUES ('', ?, 1)", (b"o" * 24,))
    old.commit()
    old.close()
    old_arena = sqlite3.connect(path)
    old_arena.execute("INSERT INTO arenas VALUES ('', '1', ?)", (config_to_json(CONFIG),))
    old_arena.commit()
    old_arena.close()
    store = Store(path)
    store.record_many([("", 2, Fire("alice", "bob", 1, 1, None, None, b"m" * 24, 5.0))])
    assert store.current_game("") == (2, [Fire("alice", "bob", 1, 1, None, None, b"m" * 24, 5.0)])
    seed, config, id_key = store.arena("") or ("", CONFIG, b"")
    assert (seed, config, len(id_key)) == ("1", CONFIG, 32)  # an arena from v1 gets its game-id key
    assert store.arena("") == (seed, config, id_key)  # once


def _ticks(store: Store, entries: list[tuple[str, int, float]]) -> None:
    for arena, game, now in entries:
        store.record_many([(arena, game, Tick(now))])


# Two arenas' games, interleaved as arena threads write them.
INTERLEAVED = [("a", 1, 1.0), ("b", 1, 2.0), ("a", 1, 3.0), ("a", 2, 4.0), ("b", 1, 5.0), ("a", 2, 6.0), ("b", 2, 7.0)]


def _assert_interleaved(store: Store) -> None:
    assert store.games("a") == [(1, 2), (2, 2)]
    assert store.games("b") == [(1, 2), (2, 1)]
    assert store.events("a", 1) == [Tick(1.0), Tick(3.0)]
    assert store.events("b", 1) == [Tick(2.0), Tick(5.0)]
    assert store.current_game("a") == (2, [Tick(4.0), Tick(6.0)])
    assert store.current_game("b") == (2, [Tick(7.0)])
    assert store.current_game("c") == (1, [])


def test_each_games_events_are_read_back_in_order_among_other_arenas(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    _ticks(store, INTERLEAVED[:3])
    # batches that start a game, and one that starts two
    batches = [INTERLEAVED[3:5], INTERLEAVED[5:7]]
    for batch in batches:
        store.record_many([(arena, game, Tick(now)) for arena, game, now in batch])
    _assert_interleaved(store)
    store.close()
    _assert_interleaved(Store(tmp_path / "state.db"))


def test_a_state_file_from_before_the_games_table_is_read_and_carried_on(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = _old_state_file(
        path,
        """
        CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, arena TEXT NOT NULL,
                             game INTEGER NOT NULL, event TEXT NOT NULL, nonce BLOB);
        CREATE INDEX events_by_game ON events (arena, game, id);
        """,
    )
    for arena, game, now in INTERLEAVED[:6]:
        old.execute(
            "INSERT INTO events (arena, game, event) VALUES (?, ?, ?)", (arena, game, f'{{"type":"tick","now":{now}}}')
        )
    old.commit()
    old.close()
    store = Store(path)
    store.record_many([("b", 2, Tick(7.0))])
    _assert_interleaved(store)
    indexes = store._db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'")
    assert indexes.fetchall() == []  # one b-tree per commit from now on


def test_state_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_new_settings_are_journaled_and_replayed(tmp_path: Path) -> None:
    store, key, d = recording(tmp_path, "x", 5)
    d.join("alice")
    faster = Config(placement_timeout=5, turn_timeout=2, reset_after=1)
    restarted = resumed(store, "x", key, faster)
    assert restarted.game.config == faster
    d2 = RecordingDriver(store, restarted, "x")
    d2.join("bob")  # the deadline now follows the new settings
    assert restarted.game.next_deadline() == pytest.approx(d2.now + 5)
    # a later restart with the same flags replays the switch at the same point
    again = resumed(store, "x", key, faster)
    assert again.game.snapshot() == restarted.game.snapshot()
    # an unknown seed for a known arena keeps the stored one
    assert store.arena("x") == ("5/x", CONFIG, restarted.game.id_key)


def test_journal_export_and_replay(tmp_path: Path) -> None:
    store, _key, d = recording(tmp_path, "p", 9)
    state = store.path
    d.start({"alice": ROWS, "bob": COLUMNS})
    winner = d.cur
    d.wear_down("bob" if winner == "alice" else "alice", all_cells(COLUMNS if winner == "alice" else ROWS), winner)
    assert d.game.winner == winner
    store.close()
    out = tmp_path / "game.jsonl"
    result = CliRunner().invoke(main, ["journal", "export", str(out), "--state", str(state), "--arena", "p"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["type"] == "game" and lines[0]["seed"] == "9/p"
    joins = [e for e in lines if e["type"] == "join"]
    assert joins and all(e["redacted"] for e in joins)  # keys are digested
    replay = CliRunner().invoke(main, ["journal", "replay", str(out)])
    assert replay.exit_code == 0, replay.output
    assert f"state over, {d.game.turn} turns, winner {winner} (victory)" in replay.output
    assert "0 rejected" in replay.output
    assert '"termination":"victory"' in replay.output
    # a journal that does not follow the rules is caught
    fires = [i for i, e in enumerate(lines) if e["type"] == "fire"]
    lines[fires[1]]["nonce"] = lines[fires[0]]["nonce"]  # a replayed signature
    out.write_text("".join(json.dumps(e) + "\n" for e in lines))
    bad = CliRunner().invoke(main, ["journal", "replay", str(out)])
    assert bad.exit_code == ExitCode.FAILED and "replayed signature" in bad.output


def test_an_export_predicts_no_later_games_first_player(tmp_path: Path) -> None:
    """A referee's arena (no --seed) draws each game's first player from its
    secret key: an export (what a team may be handed) carries that game's
    draw, enough to replay it, and nothing that tells another game's. Before,
    it carried the arena's seed, and with the game number every later game's
    first player followed (5 of 5 in the review)."""
    store, _key, d = recording(tmp_path, "p", None)
    assert d.game.seed == KEYED_DRAW
    for _ in range(3):
        d.start({"alice": ROWS, "bob": COLUMNS})
        d.wear_down("bob" if d.cur == "alice" else "alice", all_cells(COLUMNS if d.cur == "alice" else ROWS), d.cur)
        d.send(Tick(d.now + CONFIG.reset_after + 1))  # the reset: the next game
    store.close()
    out = tmp_path / "game2.jsonl"
    args = ["journal", "export", str(out), "--state", str(tmp_path / "state.db"), "--arena", "p", "--game", "2"]
    assert CliRunner().invoke(main, args).exit_code == 0
    head = json.loads(out.read_text().splitlines()[0])
    assert head["seed"] == KEYED_DRAW and head["draw"] == draw_for(d.game.id_key, 2)
    assert d.game.id_key.hex() not in out.read_text()  # the key itself never
    # the draw replays game 2 exactly: the same first player
    replayed = CliRunner().invoke(main, ["journal", "replay", str(out)])
    assert replayed.exit_code == 0 and "0 rejected" in replayed.output, replayed.output
    again = Game(CONFIG, Topics("p"), head["seed"], game_no=2, game_id=head["game_id"], draw=head["draw"])
    assert again.draw() == head["draw"]
    # ... and says nothing of game 3's (a keyed hash, where the seed told every game's)
    assert head["draw"] != draw_for(d.game.id_key, 3)
    assert Game(CONFIG, Topics("p"), "9/p", game_no=3).draw() == "9/p/3"  # a given --seed: predictable on purpose


def test_a_closed_lobby_is_journaled_and_replayed(tmp_path: Path) -> None:
    store, key, d = recording(tmp_path, "x", 5)
    d.join("alice")
    d.place("alice", ROWS)
    d.ok(CloseLobby("no-show: bob", d.now))
    d.join("carol")
    again = resumed(store, "x", key)
    assert again.game.snapshot() == d.game.snapshot()
    assert list(again.game.players) == ["carol"] and again.game.game_no == 2


@pytest.mark.parametrize(
    "event",
    [
        Fire("alice", "bob", 0, 9, 12, "0123456789abcdef", b"\x00" * 24, 1_763_812_345.123456),
        Fire("alice", "a-b_C", 9, 0, None, None, None, 0.1),
        Fire('"q" \u00e9', 'odd "name" \u00e9', 3, 4, 0, 'g"', b"n" * 24, 1e21),
        Burn("bob", b"b" * 24, 3.0),
        # (v2.1) with what its refusal echoes of the shot
        Burn("bob", b"b" * 24, 3.0, "wrong_turn", "/players/a/fire", "wrong turn", "GBkaGxwdHh8gISIj", ("a", 3, 4)),
        Tick(5.5),
        Abandon("salvo referee --fresh", 6.25),
        CloseLobby("salvo referee --fresh", 6.25),  # Abandon's fields: told apart by type only
        Extend(2.5, 7.0),
        Join("ada", bytes(range(32)), 1.0),
        Place("ada", "carrier", Placement(0, 9, Orientation.HORIZONTAL), 2.0, b"p" * 24),
        Place("ada", "submarine", Placement(9, 0, Orientation.VERTICAL), 2.0),
        Configure(Config(turn_timeout=5.0), 8.0),
    ],
)
def test_an_events_journal_text_is_its_json(event: Event) -> None:
    assert event_text(event) == dumps(event_to_json(event))
    back = event_from_json(json.loads(event_text(event)))
    # Events are NamedTuples: == alone would take an Abandon for a CloseLobby.
    assert back == event and type(back) is type(event)


def test_the_journal_format_is_still_importable_from_the_store() -> None:
    assert (event_to_json, event_text, event_from_json) == (
        journalformat.event_to_json,
        journalformat.event_text,
        journalformat.event_from_json,
    )
    assert (config_to_json, config_from_json) == (journalformat.config_to_json, journalformat.config_from_json)


# -- the spool: durable before the results go out, in SQLite after ------------------------

KILLED_WRITER = """
import os, sys
from pathlib import Path
from salvo.game.events import Fire, Tick
from salvo.arena.journal import Store
store = Store(Path(sys.argv[1]))
store.record_many([("a", 1, Tick(1.0))])
store.settle()
store.record_many([("a", 1, Fire("al", "bob", 3, 4, 7, "g", b"k" * 24, 2.0)), ("a", 2, Tick(3.0))])
os._exit(0)  # killed before its SQLite commit: no settle, no close
"""


def _killed_writer(path: Path) -> None:
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], check=True)


@pytest.mark.parametrize("writer", [True, False])
def test_events_a_killed_referee_had_only_spooled_are_taken_in_on_the_next_open(tmp_path: Path, writer: bool) -> None:
    path = tmp_path / "state.db"
    _killed_writer(path)
    spool = Path(f"{path}-spool")
    assert spool.stat().st_size > 0 and stat.S_IMODE(spool.stat().st_mode) == 0o600
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM events").fetchone() == (1,)  # only the settled one
    store = Store(path, writer=writer)  # a restarted referee, or an audit
    assert store.events("a", 1) == [Tick(1.0), Fire("al", "bob", 3, 4, 7, "g", b"k" * 24, 2.0)]
    assert store.current_game("a") == (2, [Tick(3.0)])
    assert spool.stat().st_size == 0
    store.close()


def test_a_cut_off_or_damaged_spool_line_ends_what_is_taken_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    _killed_writer(path)
    spool = Path(f"{path}-spool")
    good = spool.read_bytes()
    spool.write_bytes(good + b'4\t"a"\t2\t-\t{"type":"ti')  # a power cut mid-line
    with caplog.at_level(logging.WARNING, "salvo.arena.journal"):
        store = Store(path)
    assert store.current_game("a") == (2, [Tick(3.0)])
    assert "1 damaged spool line" in caplog.text
    store.record_many([("a", 2, Tick(4.0))])  # ids go on after the taken-in ones
    assert store.current_game("a") == (2, [Tick(3.0), Tick(4.0)])
    store.close()
    # garbage in the middle: the lines before it are kept, nothing after it
    _killed_writer(other := tmp_path / "other.db")
    lines = Path(f"{other}-spool").read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    Path(f"{other}-spool").write_bytes(b"".join(lines[:2]) + b"\xff\xfe not a line\n" + lines[2])
    again = Store(other)
    assert again.events("a", 1) == [Tick(1.0), Fire("al", "bob", 3, 4, 7, "g", b"k" * 24, 2.0)]
    assert again.games("a") == [(1, 2)]  # game 2's one event came after the damage
    again.close()


def test_a_second_referee_on_the_same_state_file_is_refused_and_an_audit_is_not(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.add_arena("p", "1/p", CONFIG, bytes(32))
    store.record_many([("p", 1, Tick(1.0))])  # spooled, not yet settled
    with pytest.raises(StateInUse, match="in use by another referee"):
        Store(path)
    reader = Store(path, writer=False)
    assert reader.games("p") == []  # a live referee's spool is its own: not touched
    assert Path(f"{path}-spool").stat().st_size > 0
    with pytest.raises(RuntimeError):
        reader.record_many([("p", 1, Tick(2.0))])
    store.settle()
    assert reader.games("p") == [(1, 1)]
    reader.close()
    key = ["--key-file", str(tmp_path / "referee.key")]  # (never the default: it is in the working directory)
    refused = CliRunner().invoke(main, ["referee", "--state", str(path), "--broker", "mqtt://127.0.0.1:1", *key])
    assert refused.exit_code == ExitCode.LOCAL_FILE
    assert "in use by another referee" in refused.output
    store.close()
    Store(path).close()  # closed: free again


def test_the_spool_is_emptied_once_it_is_large_and_all_in_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("salvo.arena.journal.SPOOL_RESET_BYTES", 200)
    path = tmp_path / "state.db"
    spool = Path(f"{path}-spool")
    store = Store(path)
    sizes = []
    for i in range(10):
        store.record_many([("a", 1, Tick(float(i)))])
        store.settle()
        sizes.append(spool.stat().st_size)
    reset = sizes.index(0)  # emptied once it had grown past 200 bytes
    assert sizes[:reset] == sorted(sizes[:reset]) and sizes[reset - 1] + sizes[0] >= 200 and max(sizes) < 200
    assert store.events("a", 1) == [Tick(float(i)) for i in range(10)]
    store.close()


def test_a_batch_is_spooled_before_its_results_go_out_and_committed_when_the_arena_is_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The referee's order: spool append, publishes, acks; the SQLite commit
    once there is nothing to read, or once SETTLE_MAX events wait for it.
    (The arena's batch, through the in-memory transport; test_batch.py
    has the rest of the order.)"""
    path = tmp_path / "state.db"
    store = Store(path)
    seen: list[tuple[str, int, int]] = []

    def in_sqlite() -> int:
        with sqlite3.connect(path) as raw:
            return int(raw.execute("SELECT COUNT(*) FROM events WHERE arena = 'p'").fetchone()[0])

    def spooled() -> int:
        return Path(f"{path}-spool").read_bytes().count(b'"type":"tick"')

    class Seeing(FakeTransport):
        """What the state file held at each publish and ack."""

        def publish(self, topic: str, payload: str | bytes, retain: bool) -> FakeReceipt:
            seen.append((topic, spooled(), in_sqlite()))
            return super().publish(topic, payload, retain)

        def ack(self, mid: int, qos: int) -> None:
            seen.append(("ack", spooled(), in_sqlite()))

    idle = Idle()
    batch = Batch("p", Seeing(), store, when_idle=idle)

    def flush(*ticks: float) -> None:
        for t in ticks:
            batch.record(1, Tick(t))
        batch.publish(Publish("/p/game/state", "lobby", True))
        batch.ack(7, 1)
        batch.flush()

    flush(5.0)
    assert seen == [("/p/game/state", 1, 0), ("ack", 1, 0)]
    flush(6.0)  # the next message does not wait for the first one's commit
    assert seen[2:] == [("/p/game/state", 2, 0), ("ack", 2, 0)]
    assert in_sqlite() == 0
    idle.run()  # nothing to read: now the commit
    assert in_sqlite() == 2
    monkeypatch.setattr("salvo.referee.batch.SETTLE_MAX", 3)
    flush(7.0, 8.0, 9.0)  # a busy arena commits every SETTLE_MAX events
    assert in_sqlite() == 5 and seen[-1] == ("ack", 5, 2)
    assert store.events("p", 1)[-5:] == [Tick(5.0), Tick(6.0), Tick(7.0), Tick(8.0), Tick(9.0)]
    store.close()
