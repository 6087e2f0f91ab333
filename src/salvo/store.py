"""Persistence: an SQLite journal of every accepted event, per arena.

The engine is deterministic given its settings, its seed and the events it
accepted, so storing those is storing the game: a restarted referee replays
the current game's events and is exactly where it was - players and keys,
fleets, play order, turn, the shots of the salvo under way, deadlines (each
event carries its wall-clock time), stats. A fire's signature nonce is kept
in its row, so spent signatures stay spent across games; a small ``games``
table says where each game's events start. The journal doubles as an audit log
(``salvo journal export``).

WAL mode with ``synchronous=NORMAL``: a committed event survives the process
being killed (it is in the WAL); only a power cut may lose the last few. The
file holds team keys, so it is created mode 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from salvo.codec import dumps
from salvo.engine import CloseLobby, Config, Configure, Event, Fire, Join, Place, Tick
from salvo.rules import Orientation, Placement

SCHEMA = """
CREATE TABLE IF NOT EXISTS arenas (
    prefix TEXT PRIMARY KEY,
    seed TEXT NOT NULL,
    config TEXT NOT NULL            -- the settings the arena was created with
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,         -- journal order (rows are never deleted, so ids only grow)
    arena TEXT NOT NULL,
    game INTEGER NOT NULL,          -- the game the event was applied to
    event TEXT NOT NULL,            -- JSON, see event_to_json
    nonce BLOB                      -- a fire's signature nonce: a resume loads earlier games' ones
);
"""

#: Where each game's events start. Written once per game, so that a commit of
#: events writes one b-tree (the events table), not an index beside it: an
#: index on (arena, game) made a shot's commit twice as expensive. A game's
#: events are read as a rowid range scan from ``first_id``.
GAMES = """
CREATE TABLE games (
    arena TEXT NOT NULL,
    game INTEGER NOT NULL,
    first_id INTEGER NOT NULL,
    PRIMARY KEY (arena, game)
) WITHOUT ROWID;
"""

#: State files written before the nonce moved into ``events`` (one b-tree
#: less to write per commit: ~25% of a commit) keep their nonces here.
LEGACY = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'nonces'"
INSERT_EVENT = "INSERT INTO events (arena, game, event, nonce) VALUES (?, ?, ?, ?)"
HAS_GAMES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'games'"
#: The events ``e`` of game ``g``: ids from its first to (not including) the
#: next game's of the same arena; a game's events all come before the next's.
GAME_EVENTS = (
    "e.id >= g.first_id AND e.id < COALESCE((SELECT MIN(n.first_id) FROM games n"
    " WHERE n.arena = g.arena AND n.game > g.game), 9223372036854775807)"
    " AND e.arena = g.arena AND e.game = g.game"
)


# -- events as JSON ---------------------------------------------------------------------


def event_to_json(ev: Event, *, redact_keys: bool = False) -> dict[str, Any]:
    if isinstance(ev, Fire):
        return {
            "type": "fire",
            "target": ev.target,
            "x": ev.x,
            "y": ev.y,
            "turn": ev.turn,
            "nonce": ev.nonce.hex() if ev.nonce is not None else None,
            "now": ev.now,
        }
    if isinstance(ev, Tick):
        return {"type": "tick", "now": ev.now}
    if isinstance(ev, Place):
        p = ev.placement
        return {
            "type": "place",
            "name": ev.name,
            "ship": ev.ship,
            "x": p.x,
            "y": p.y,
            "orientation": p.orientation.value,
            "now": ev.now,
        }
    if isinstance(ev, Join):
        # Replays only compare keys for equality: an audit copy needs a digest, not the key.
        key = hashlib.sha256(ev.key).hexdigest() if redact_keys else ev.key.hex()
        return {"type": "join", "name": ev.name, "key": key, "redacted": redact_keys, "now": ev.now}
    if isinstance(ev, CloseLobby):
        return {"type": "close_lobby", "reason": ev.reason, "now": ev.now}
    return {"type": "configure", "config": asdict(ev.config), "now": ev.now}


def event_text(ev: Event) -> str:
    """``dumps(event_to_json(ev))``; a fire's spelled out, as there is one
    journaled per shot and the shot waits for its commit."""
    if type(ev) is not Fire:
        return dumps(event_to_json(ev))
    turn = "null" if ev.turn is None else str(ev.turn)
    nonce = "null" if ev.nonce is None else f'"{ev.nonce.hex()}"'
    return (
        f'{{"type":"fire","target":{dumps(ev.target)},"x":{ev.x},"y":{ev.y},'
        f'"turn":{turn},"nonce":{nonce},"now":{ev.now!r}}}'
    )


def event_from_json(d: dict[str, Any]) -> Event:
    kind = d["type"]
    if kind == "fire":
        nonce = bytes.fromhex(d["nonce"]) if d["nonce"] is not None else None
        return Fire(d["target"], d["x"], d["y"], d["turn"], nonce, d["now"])
    if kind == "tick":
        return Tick(d["now"])
    if kind == "place":
        return Place(d["name"], d["ship"], Placement(d["x"], d["y"], Orientation(d["orientation"])), d["now"])
    if kind == "join":
        return Join(d["name"], bytes.fromhex(d["key"]), d["now"])
    if kind == "close_lobby":
        return CloseLobby(d["reason"], d["now"])
    if kind == "configure":
        return Configure(Config(**d["config"]), d["now"])
    raise ValueError(f"unknown event type {kind!r}")


def config_to_json(config: Config) -> str:
    return json.dumps(asdict(config), sort_keys=True)


def config_from_json(text: str) -> Config:
    return Config(**json.loads(text))


# -- the store -----------------------------------------------------------------------------


class Store:
    """The referee's state file. Thread-safe: every arena thread records here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(events)")}
            if "nonce" not in columns:
                self._db.execute("ALTER TABLE events ADD COLUMN nonce BLOB")
            self._legacy_nonces = self._db.execute(LEGACY).fetchone() is not None
            if self._db.execute(HAS_GAMES).fetchone() is None:
                # A new file, or one from before the games table (which had an
                # index instead, and AUTOINCREMENT ids: both kept working).
                self._db.execute("BEGIN")
                self._db.execute(GAMES)
                self._db.execute("INSERT INTO games SELECT arena, game, MIN(id) FROM events GROUP BY arena, game")
                self._db.execute("DROP INDEX IF EXISTS events_by_game")
                self._db.execute("COMMIT")
            self._games = set(self._db.execute("SELECT arena, game FROM games").fetchall())

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- arenas -------------------------------------------------------------------------

    def arena(self, prefix: str) -> tuple[str, Config] | None:
        """The seed and creation settings of a known arena."""
        with self._lock:
            row = self._db.execute("SELECT seed, config FROM arenas WHERE prefix = ?", (prefix,)).fetchone()
        return (row[0], config_from_json(row[1])) if row else None

    def add_arena(self, prefix: str, seed: str, config: Config) -> None:
        with self._lock:
            self._db.execute("INSERT INTO arenas VALUES (?, ?, ?)", (prefix, seed, config_to_json(config)))

    def arenas(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT prefix FROM arenas ORDER BY prefix")]

    # -- the journal ----------------------------------------------------------------------

    def record(self, arena: str, game_no: int, event: Event) -> None:
        """Persist one accepted event (and its signature nonce) atomically."""
        self.record_many([(arena, game_no, event)])

    def record_many(self, entries: list[tuple[str, int, Event]]) -> None:
        """Persist accepted events in one transaction (a group commit: one
        commit's cost for a whole salvo that arrived at once)."""
        rows = [(a, g, event_text(ev), ev.nonce if isinstance(ev, Fire) else None) for a, g, ev in entries]
        started: list[tuple[str, int]] = []
        with self._lock:
            db = self._db
            if len(rows) == 1 and rows[0][:2] in self._games:
                # A lone event of a known game (a shot, one at a time): one
                # statement is its own transaction, no BEGIN and COMMIT calls.
                db.execute(INSERT_EVENT, rows[0])
                return
            db.execute("BEGIN")
            try:
                for row in rows:
                    cursor = db.execute(INSERT_EVENT, row)
                    game = (row[0], row[1])
                    if game not in self._games and game not in started:
                        db.execute("INSERT OR IGNORE INTO games VALUES (?, ?, ?)", (*game, cursor.lastrowid))
                        started.append(game)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._games.update(started)

    def current_game(self, arena: str) -> tuple[int, list[Event]]:
        """The number of the last game with events, and its events in order."""
        with self._lock:
            row = self._db.execute("SELECT MAX(game) FROM games WHERE arena = ?", (arena,)).fetchone()
        if row[0] is None:
            return 1, []
        return int(row[0]), self.events(arena, int(row[0]))

    def config_before(self, arena: str, game_no: int) -> Config | None:
        """The settings of the last Configure event before game ``game_no``."""
        with self._lock:
            row = self._db.execute(
                'SELECT event FROM events WHERE arena = ? AND game < ? AND event LIKE \'{"type":"configure"%\''
                " ORDER BY id DESC LIMIT 1",
                (arena, game_no),
            ).fetchone()
        if row is None:
            return None
        ev = event_from_json(json.loads(row[0]))
        assert isinstance(ev, Configure)
        return ev.config

    def nonces(self, arena: str, before_game: int | None = None) -> set[bytes]:
        """Nonces of accepted signatures (of games before ``before_game``)."""
        where = "arena = ? AND nonce IS NOT NULL"
        args: list[object] = [arena]
        if before_game is not None:
            where += " AND game < ?"
            args.append(before_game)
        tables = ("events", "nonces") if self._legacy_nonces else ("events",)
        with self._lock:
            return {bytes(r[0]) for t in tables for r in self._db.execute(f"SELECT nonce FROM {t} WHERE {where}", args)}

    def games(self, arena: str) -> list[tuple[int, int]]:
        """(game number, number of events) of every game in the journal."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT g.game, (SELECT COUNT(*) FROM events e WHERE {GAME_EVENTS})"
                " FROM games g WHERE g.arena = ? ORDER BY g.game",
                (arena,),
            ).fetchall()
        return [(int(g), int(n)) for g, n in rows]

    def events(self, arena: str, game_no: int) -> list[Event]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT e.event FROM games g JOIN events e ON {GAME_EVENTS}"
                " WHERE g.arena = ? AND g.game = ? ORDER BY e.id",
                (arena, game_no),
            ).fetchall()
        return [event_from_json(json.loads(r[0])) for r in rows]
