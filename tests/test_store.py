"""Persistence without a broker: a referee resumed from its state file at any
point is exactly the referee that was running."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from nacl.public import PrivateKey

from salvo.cli import ExitCode, main
from salvo.codec import dumps
from salvo.engine import Accepted, CloseLobby, Config, Event, Fire, Phase, Tick
from salvo.protocol import Arena
from salvo.referee import make_arenas
from salvo.store import Store, event_from_json, event_text, event_to_json

from kit import COLUMNS, ROWS, Driver, all_cells

CONFIG = Config(placement_timeout=60, turn_timeout=30, reset_after=100)


class RecordingDriver(Driver):
    """Drives a store-backed arena and journals what the engine accepts, as
    the referee does (Record effects come before the publishes)."""

    def __init__(self, store: Store, arena: Arena, prefix: str) -> None:
        super().__init__()
        self.game = arena.game
        self.store, self.prefix = store, prefix
        self.checks = 0

    def send(self, event: Event):  # type: ignore[no-untyped-def]
        game_no = self.game.game_no
        result = super().send(event)
        if isinstance(result, Accepted):
            self.store.record(self.prefix, game_no, event)
        return result


def resumed(store: Store, prefix: str, key: PrivateKey, config: Config = CONFIG) -> Arena:
    (arena,) = make_arenas([prefix], config, None, key, store)
    return arena


def recording(tmp_path: Path, prefix: str, seed: int) -> tuple[Store, PrivateKey, RecordingDriver]:
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


def test_signatures_stay_spent_across_games_and_restarts(tmp_path: Path) -> None:
    store, key, d = recording(tmp_path, "", 3)
    d.start({"alice": ROWS, "bob": COLUMNS})
    nonce = b"n" * 24
    d.ok(Fire("bob" if d.cur == "alice" else "alice", 9, 9, None, nonce, d.now))
    again = resumed(store, "", key)
    assert nonce in again.game.used_nonces
    assert store.nonces("") == {nonce} | set(d.game.used_nonces)


def _old_state_file(path: Path, events_schema: str) -> sqlite3.Connection:
    """A state file as an earlier version wrote it: its arenas table and the given events schema."""
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE arenas (prefix TEXT PRIMARY KEY, seed TEXT NOT NULL, config TEXT NOT NULL);" + events_schema
    )
    return old


def test_a_state_file_from_before_the_nonce_column_keeps_its_nonces(tmp_path: Path) -> None:
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
    store = Store(path)
    store.record_many([("", 2, Fire("bob", 1, 1, None, b"m" * 24, 5.0))])
    assert store.nonces("") == {b"o" * 24, b"m" * 24}
    assert store.nonces("", before_game=2) == {b"o" * 24}


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
    assert store.arena("x") == ("5/x", CONFIG)


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
    assert f"winner {winner}" in replay.output and "0 rejected" in replay.output
    assert '"termination":"victory"' in replay.output
    # a journal that does not follow the rules is caught
    fires = [i for i, e in enumerate(lines) if e["type"] == "fire"]
    lines[fires[1]]["nonce"] = lines[fires[0]]["nonce"]  # a replayed signature
    out.write_text("".join(json.dumps(e) + "\n" for e in lines))
    bad = CliRunner().invoke(main, ["journal", "replay", str(out)])
    assert bad.exit_code == ExitCode.FAILED and "replayed signature" in bad.output


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
        Fire("bob", 0, 9, 12, b"\x00" * 24, 1_763_812_345.123456),
        Fire("a-b_C", 9, 0, None, None, 0.1),
        Fire('odd "name" \u00e9', 3, 4, 0, b"n" * 24, 1e21),
        Tick(5.5),
    ],
)
def test_an_events_journal_text_is_its_json(event: Event) -> None:
    assert event_text(event) == dumps(event_to_json(event))
    assert event_from_json(json.loads(event_text(event))) == event
