"""Persistence: an SQLite journal of every accepted event, per arena.

The engine is deterministic given its settings, its seed and the events it
accepted, so storing those is storing the game: a restarted referee replays
the current game's events and is exactly where it was - players and keys,
fleets, play order, turn, the shots of the salvo under way, spent signature
nonces (shots and burns are events), deadlines (each event carries its
wall-clock time), stats. A fire's or burn's nonce is also kept in its row
for audits; a small ``games``
table says where each game's events start. The journal doubles as an audit log
(``salvo journal export``).

Write-ahead in two steps, so that a shot's result is not held up by an SQLite
commit: an accepted batch is first appended to a spool file beside the state
file (``<state>-spool``, one ``write()``: from then on it survives the process
being killed), then published, then moved into SQLite in one transaction
(:meth:`Store.settle`, once the referee has nothing to read). Whoever opens the state
file next with no referee holding it takes the complete lines a killed
referee left in the spool first. SQLite runs in WAL mode with
``synchronous=NORMAL``: as with the spool, only a power cut may lose the
last few events. The spool is locked (``flock``) while a referee writes: a
second referee on the same state file is refused. Both files hold team keys,
so they are created mode 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Final

from salvo.arena.inplace import InPlace
from salvo.arena.journalformat import (
    Row,
    config_from_json,
    config_to_json,
    event_from_json,
    event_text,
    parse_spool_line,
    spool_line,
)
from salvo.arena.statefile import MACHINE, StateInUse, StoreDamaged, StoreFailure, damage, failure
from salvo.game.events import Burn, Config, Configure, Event, Fire, Place
from salvo.spec.codec import dumps

SCHEMA = """
CREATE TABLE IF NOT EXISTS arenas (
    prefix TEXT PRIMARY KEY,
    seed TEXT NOT NULL,
    config TEXT NOT NULL,           -- the settings the arena was created with
    id_key BLOB,                    -- the secret its game ids derive from (v2)
    published INTEGER NOT NULL DEFAULT 0,  -- events up to this id: their results reached the broker
    lease TEXT                      -- the last lease this state file held the arena with
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,         -- journal order (rows are never deleted, so ids only grow)
    arena TEXT NOT NULL,
    game INTEGER NOT NULL,          -- the game the event was applied to
    event TEXT NOT NULL,            -- JSON, see event_to_json
    nonce BLOB                      -- a fire's or burn's signature nonce (an audit column)
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

INSERT_EVENT = "INSERT INTO events (id, arena, game, event, nonce) VALUES (?, ?, ?, ?, ?)"
INSERT_GAME = "INSERT OR IGNORE INTO games VALUES (?, ?, ?)"
SET_PUBLISHED = "UPDATE arenas SET published = MAX(published, ?) WHERE prefix = ?"
TAKE_EVENT = INSERT_EVENT.replace("INSERT", "INSERT OR IGNORE", 1)
TAKE_GAMES = "INSERT OR IGNORE INTO games SELECT arena, game, MIN(id) FROM events WHERE id >= ? GROUP BY arena, game"
HAS_GAMES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'games'"
#: The events ``e`` of game ``g``: ids from its first to (not including) the
#: next game's of the same arena; a game's events all come before the next's.
GAME_EVENTS = (
    "e.id >= g.first_id AND e.id < COALESCE((SELECT MIN(n.first_id) FROM games n"
    " WHERE n.arena = g.arena AND n.game > g.game), 9223372036854775807)"
    " AND e.arena = g.arena AND e.game = g.game"
)


# -- the store -----------------------------------------------------------------------------

log = logging.getLogger("salvo.arena.journal")

#: Once the spool holds this much and all of it is in SQLite, it is emptied.
SPOOL_RESET_BYTES: Final = 1 << 20


class Store:
    """The referee's state file. Thread-safe.

    ``writer=False`` (audits, ``salvo journal export``) neither locks nor
    writes the spool; it still takes in what a killed referee left there
    when no referee holds the file."""

    def __init__(self, path: Path, *, writer: bool = True) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if why := damage(path):
            raise StoreDamaged(why)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._spool_path = Path(f"{path}-spool")
        self._spool = -1
        #: bytes in the spool (a spool taken in but not emptied at start counts)
        self._spool_bytes = 0
        if writer:
            self._spool = os.open(self._spool_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self._spool, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._spool)
                raise StateInUse(f"in use by another referee ({self._spool_path} is locked)") from None
        try:
            self._open_db(writer)
        except sqlite3.DatabaseError as exc:
            if self._spool >= 0:
                os.close(self._spool)
            if getattr(exc, "sqlite_errorcode", -1) & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                raise StoreDamaged(f"the state file {path} is damaged: {exc}") from None
            raise
        except BaseException:
            if self._spool >= 0:
                os.close(self._spool)
            raise
        self._arena_json: dict[str, str] = {}

    def _open_db(self, writer: bool) -> None:
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        #: the SQLite connection; taken before _spool_lock when both are needed
        self._lock = threading.Lock()
        #: ids, the spool file and the events not yet in SQLite
        self._spool_lock = threading.Lock()
        self._pending: list[Row] = []
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # A file cut short or overwritten may open and fail later, halfway
            # through a replay: look at every page once, before anything is read.
            (verdict,) = self._db.execute("PRAGMA quick_check(1)").fetchone()
            if verdict != "ok":
                raise StoreDamaged(f"the state file {self.path} is damaged: {verdict}")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(events)")}
            if "nonce" not in columns:
                self._db.execute("ALTER TABLE events ADD COLUMN nonce BLOB")
            arena_columns = {row[1] for row in self._db.execute("PRAGMA table_info(arenas)")}
            for column, decl in (("id_key", "BLOB"), ("published", "INTEGER NOT NULL DEFAULT 0"), ("lease", "TEXT")):
                if column not in arena_columns:
                    self._db.execute(f"ALTER TABLE arenas ADD COLUMN {column} {decl}")
            if self._db.execute(HAS_GAMES).fetchone() is None:
                # A new file, or one from before the games table (which had an
                # index instead, and AUTOINCREMENT ids: both kept working).
                self._db.execute("BEGIN")
                self._db.execute(GAMES)
                self._db.execute("INSERT INTO games SELECT arena, game, MIN(id) FROM events GROUP BY arena, game")
                self._db.execute("DROP INDEX IF EXISTS events_by_game")
                self._db.execute("COMMIT")
            if writer:
                self._take_spool(self._spool)
            else:
                self._take_unheld_spool()
            self._games = set(self._db.execute("SELECT arena, game FROM games").fetchall())
            self._next_id = int(self._db.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]) + 1
            #: arena -> the published mark not yet written (see mark_published)
            self._marks: dict[str, int] = {}
        self._identity = self._identify()
        #: a writer's: asked before each batch is published (record_many)
        self._place: InPlace | None = None
        if writer:
            spool = os.fstat(self._spool)  # the one it writes to, whatever the path says by now
            self._identity = (self._identity[0], (spool.st_dev, spool.st_ino))
            self._place = InPlace(self.path, self._spool_path, self._identity, self._moved)

    def close(self) -> None:
        """Settle, close, and empty the spool, but only once all it held is in
        SQLite and on disk: after a failure the spool keeps it for the next start."""
        try:
            self._close()
        finally:
            if self._place is not None:
                self._place.close()

    def _close(self) -> None:
        settled, intact = False, damage(self.path) is None  # a damaged file gets nothing more
        if intact:
            with contextlib.suppress(StoreFailure):
                self.settle()
                settled = True
        with self._lock:
            checkpointed = False
            with contextlib.suppress(sqlite3.Error):
                checkpointed = settled and self._checkpoint()
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            if self._spool >= 0:
                with self._spool_lock:
                    if checkpointed and not self._pending:
                        with contextlib.suppress(OSError):
                            os.ftruncate(self._spool, 0)
                    os.close(self._spool)  # and with it the lock
                    self._spool = -1

    # -- the spool ----------------------------------------------------------------------------

    def _take_unheld_spool(self) -> None:
        """A reader: take in a killed referee's spool, unless a referee holds it."""
        try:
            fd = os.open(self._spool_path, os.O_WRONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a live referee: it settles its own as soon as it is idle
            return
        try:
            self._take_spool(fd)
        finally:
            os.close(fd)

    def _take_spool(self, fd: int) -> None:
        """Move the complete lines of a spool (locked, by ``fd``) into SQLite,
        then empty it. Called with ``_lock`` held, before any event is recorded."""
        data = self._spool_path.read_bytes()
        if not data:
            return
        rows = []
        lines = data.split(b"\n")
        for line in lines[:-1]:  # the last piece has no newline: empty, or cut off by a power cut
            try:
                rows.append(parse_spool_line(line))
            except (ValueError, UnicodeDecodeError):
                break
        dropped = len(lines) - 1 - len(rows) + (1 if lines[-1] else 0)
        if dropped:
            log.warning("%s: %d damaged spool line(s) dropped, from the first one on", self._spool_path, dropped)
        if rows:
            db = self._db
            db.execute("BEGIN")
            # Some may have been settled before the referee stopped: ids tell.
            db.executemany(TAKE_EVENT, rows)
            db.execute(TAKE_GAMES, (min(r[0] for r in rows),))
            db.execute("COMMIT")
            log.info("%s: %d event(s) a stopped referee had not yet settled taken in", self._spool_path, len(rows))
        if self._checkpoint():
            os.ftruncate(fd, 0)
        else:
            self._spool_bytes += len(data)  # emptied by a later settle

    def _checkpoint(self) -> bool:
        """Copy the WAL into the state file, synced (``synchronous=NORMAL``
        syncs checkpoints, not commits): only then may the spool be emptied,
        so that the spool and the file itself always hold every event, and a
        lost or deleted ``-wal`` loses nothing. PASSIVE: never waits for a
        reader (``salvo journal export``); False when it could not finish,
        and the spool is kept until a later one does. Called with ``_lock``."""
        busy, frames, done = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return not busy and frames == done

    def checkpoint(self) -> None:
        """Put what SQLite holds (arenas, leases) into the state file proper."""
        try:
            with self._lock:
                self._checkpoint()
        except sqlite3.Error as exc:
            raise failure(self.path, exc) from exc

    # -- arenas -------------------------------------------------------------------------

    def arena(self, prefix: str) -> tuple[str, Config, bytes] | None:
        """The seed, creation settings and game-id key of a known arena. An
        arena from before game ids (protocol v1) gets its key now."""
        with self._lock:
            row = self._db.execute("SELECT seed, config, id_key FROM arenas WHERE prefix = ?", (prefix,)).fetchone()
            if row is None:
                return None
            id_key = row[2]
            if id_key is None:
                id_key = os.urandom(32)
                self._db.execute("UPDATE arenas SET id_key = ? WHERE prefix = ?", (id_key, prefix))
        return row[0], config_from_json(row[1]), bytes(id_key)

    def add_arena(self, prefix: str, seed: str, config: Config, id_key: bytes) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO arenas (prefix, seed, config, id_key) VALUES (?, ?, ?, ?)",
                (prefix, seed, config_to_json(config), id_key),
            )

    def arenas(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT prefix FROM arenas ORDER BY prefix")]

    # -- the journal ----------------------------------------------------------------------

    def record(self, arena: str, game_no: int, event: Event) -> int:
        """Persist one accepted event (and its signature nonce), settled; its id."""
        last = self.record_many([(arena, game_no, event)])
        self.settle()
        return last

    def record_many(self, entries: list[tuple[str, int, Event]]) -> int:
        """Persist accepted events: one append to the spool, after which they
        survive the process being killed. :meth:`settle` moves them into
        SQLite (a referee calls it once the batch's results are out).
        The id of the last one."""
        place = self._place
        if place is None or self._spool < 0:
            raise RuntimeError("a closed or read-only store records nothing")
        with self._spool_lock:
            rows: list[Row] = []
            lines = []
            for arena, game, ev in entries:
                game_key = (arena, game)
                starts = game_key not in self._games
                if starts:
                    self._games.add(game_key)
                nonce = ev.nonce if isinstance(ev, (Fire, Burn, Place)) else None
                row = (self._next_id, arena, game, event_text(ev), nonce, starts)
                self._next_id += 1
                rows.append(row)
                arena_json = self._arena_json.get(arena) or self._arena_json.setdefault(arena, dumps(arena))
                lines.append(spool_line(row, arena_json))
            data = "".join(lines).encode()
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._spool, view) :]
            except OSError as exc:
                # A cut-off last line is dropped by whoever takes the spool in.
                raise failure(self._spool_path, exc) from exc
            self._spool_bytes += len(data)
            # Written, but to the file a restart will read? (Deleted, replaced
            # or emptied under the referee, it would be lost with whatever it
            # published.) Asked every time, not once a second (check_intact):
            # one poll() where inotify watches (salvo.arena.inplace).
            place.check()
            self._pending += rows
            return self._next_id - 1

    @property
    def pending(self) -> int:
        """Events recorded but not yet settled."""
        return len(self._pending)

    def settle(self) -> None:
        """Move recorded events into SQLite: one commit for all of them.
        Raises StoreFailure when SQLite cannot write; the events stay pending
        and in the spool."""
        with self._lock:
            with self._spool_lock:
                rows = list(self._pending)
                marks, self._marks = self._marks, {}
            if not rows and not marks:
                return
            db = self._db
            try:
                if marks:
                    db.execute("BEGIN")
                    db.executemany(INSERT_EVENT, [r[:5] for r in rows])
                    db.executemany(INSERT_GAME, [(r[1], r[2], r[0]) for r in rows if r[5]])
                    db.executemany(SET_PUBLISHED, [(m, a) for a, m in marks.items()])
                    db.execute("COMMIT")
                elif len(rows) == 1 and not rows[0][5]:
                    # A lone event of a known game (a shot, one at a time): one
                    # statement is its own transaction, no BEGIN and COMMIT calls.
                    db.execute(INSERT_EVENT, rows[0][:5])
                else:
                    db.execute("BEGIN")
                    db.executemany(INSERT_EVENT, [r[:5] for r in rows])
                    db.executemany(INSERT_GAME, [(r[1], r[2], r[0]) for r in rows if r[5]])
                    db.execute("COMMIT")
            except (sqlite3.Error, OSError) as exc:
                if db.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL does)
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                with self._spool_lock:
                    for arena, mark in marks.items():
                        self._marks[arena] = max(mark, self._marks.get(arena, 0))
                raise failure(self.path, exc) from exc
            with self._spool_lock:
                # Only now are they SQLite's; more may have been recorded meanwhile.
                del self._pending[: len(rows)]
                if self._spool_bytes >= SPOOL_RESET_BYTES and not self._pending:
                    try:
                        if self._checkpoint():
                            os.ftruncate(self._spool, 0)
                            self._spool_bytes = 0
                    except (sqlite3.Error, OSError) as exc:
                        raise failure(self._spool_path, exc) from exc

    def current_game(self, arena: str) -> tuple[int, list[Event]]:
        """The number of the last game with events, and its events in order."""
        game_no, rows = self.current_game_ids(arena)
        return game_no, [ev for _id, ev in rows]

    def current_game_ids(self, arena: str) -> tuple[int, list[tuple[int, Event]]]:
        """The number of the last game with events, and its (id, event) pairs in order."""
        self.settle()
        with self._lock:
            row = self._db.execute("SELECT MAX(game) FROM games WHERE arena = ?", (arena,)).fetchone()
        if row[0] is None:
            return 1, []
        return int(row[0]), self.events_ids(arena, int(row[0]))

    # -- what reached the broker, and who holds the arena --------------------------------

    def mark_published(self, arena: str, event_id: int) -> None:
        """The results of ``arena``'s events up to ``event_id`` reached the
        broker. Written with the next settle: a mark that lags after a crash
        only makes a restarted referee publish some results twice, which
        clients take once (hits carry turn and shot; retained topics are states)."""
        with self._spool_lock:
            if event_id > self._marks.get(arena, 0):
                self._marks[arena] = event_id

    def published(self, arena: str) -> int:
        """The id up to which ``arena``'s events had their results published."""
        self.settle()
        with self._lock:
            row = self._db.execute("SELECT published FROM arenas WHERE prefix = ?", (arena,)).fetchone()
        return int(row[0]) if row else 0

    def lease(self, arena: str) -> str | None:
        """The lease this state file last held ``arena`` with."""
        with self._lock:
            row = self._db.execute("SELECT lease FROM arenas WHERE prefix = ?", (arena,)).fetchone()
        return str(row[0]) if row and row[0] is not None else None

    def set_lease(self, arena: str, lease: str) -> None:
        try:
            with self._lock:
                self._db.execute("UPDATE arenas SET lease = ? WHERE prefix = ?", (lease, arena))
        except sqlite3.Error as exc:
            raise failure(self.path, exc) from exc

    # -- is the file still ours? ---------------------------------------------------------

    @property
    def run_identity(self) -> str:
        """Which file this is, as a copy of it is not: its device and inode,
        on this machine. A lease names it, so that a referee started on a
        copy (a second machine, a restored backup) never takes the live
        referee's lease for its own previous run."""
        dev, ino = self._identity[0]
        return hashlib.blake2b(f"{MACHINE}:{dev}:{ino}".encode(), digest_size=8).hexdigest()

    def _identify(self) -> tuple[tuple[int, int], ...]:
        """(device, inode) of the state file and the spool, as opened."""
        paths = [self.path, self._spool_path] if self._spool >= 0 else [self.path]
        return tuple((st.st_dev, st.st_ino) for st in (os.stat(p) for p in paths))

    def _moved(self) -> None:
        raise StoreFailure(
            f"the state file {self.path} (or its spool) was deleted, emptied or replaced while the referee ran;"
            " stopping before anything more is published: what it journals now would be lost"
        )

    def check_intact(self) -> None:
        """Raise StoreFailure when the state file or its spool was deleted or
        replaced under this referee: what it writes from then on would be
        lost, and a restart would not find the game."""
        try:
            now = self._identify()
        except FileNotFoundError:
            now = ()
        if now != self._identity:
            raise StoreFailure(
                f"the state file {self.path} (or its spool) was deleted or replaced while the referee ran;"
                " stopping: what it journals now would be lost"
            )
        if why := damage(self.path):
            raise StoreDamaged(f"{why}, while the referee ran; stopping: a restart could not find the game")

    def config_before(self, arena: str, game_no: int) -> Config | None:
        """The settings of the last Configure event before game ``game_no``."""
        self.settle()
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

    def games(self, arena: str) -> list[tuple[int, int]]:
        """(game number, number of events) of every game in the journal."""
        self.settle()
        with self._lock:
            rows = self._db.execute(
                f"SELECT g.game, (SELECT COUNT(*) FROM events e WHERE {GAME_EVENTS})"
                " FROM games g WHERE g.arena = ? ORDER BY g.game",
                (arena,),
            ).fetchall()
        return [(int(g), int(n)) for g, n in rows]

    def events(self, arena: str, game_no: int) -> list[Event]:
        return [ev for _id, ev in self.events_ids(arena, game_no)]

    def events_ids(self, arena: str, game_no: int) -> list[tuple[int, Event]]:
        self.settle()
        with self._lock:
            rows = self._db.execute(
                f"SELECT e.id, e.event FROM games g JOIN events e ON {GAME_EVENTS}"
                " WHERE g.arena = ? AND g.game = ? ORDER BY e.id",
                (arena, game_no),
            ).fetchall()
        return [(int(r[0]), event_from_json(json.loads(r[1]))) for r in rows]
