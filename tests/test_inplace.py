"""The journal's check before each batch is published (salvo.arena.inplace):
a state file or spool deleted, emptied or replaced under the referee, or a
directory on the way moved, stops the batch. Proven both ways: by inotify
(one poll() a batch) and by the stat() it falls back to."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from salvo.arena import inplace
from salvo.arena.journal import Store
from salvo.arena.statefile import StoreFailure
from salvo.game.events import Config, Event, Tick

CONFIG = Config(placement_timeout=60, turn_timeout=30, reset_after=100)
MOVED = "deleted, emptied or replaced while the referee ran"


def tick(at: float = 1.0) -> list[tuple[str, int, Event]]:
    return [("a", 1, Tick(at))]


@pytest.fixture(params=["inotify", "stat"])
def watched_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: as on Linux, and as where inotify is not there."""
    if request.param == "stat":
        monkeypatch.setattr(inplace._Notify, "watching", classmethod(lambda _cls, _db, _spool: None))
    return str(request.param)


@pytest.fixture
def state(tmp_path: Path, watched_by: str) -> Iterator[tuple[Store, Path]]:
    path = tmp_path / "night" / "data" / "state.db"
    store = Store(path)
    assert store._place is not None
    assert store._place.notified == (watched_by == "inotify")  # not passing by the other way
    store.add_arena("a", "1/a", CONFIG, bytes(32))
    store.record_many(tick())
    yield store, path
    store.close()


def _replace(path: Path) -> None:
    other = path.with_name("other")
    other.write_bytes(path.read_bytes())
    os.replace(other, path)


def _rename(directory: Path) -> None:
    directory.rename(directory.with_name(directory.name + "-old"))


CHANGES: dict[str, Callable[[Path], object]] = {
    "state file deleted": lambda p: p.unlink(),
    "state file renamed away": lambda p: p.rename(p.with_name("state.db.bak")),
    "spool renamed away": lambda p: Path(f"{p}-spool").rename(p.with_name("spool.bak")),
    "state file replaced": _replace,
    "state file emptied": lambda p: os.truncate(p, 0),
    "spool deleted": lambda p: Path(f"{p}-spool").unlink(),
    "spool replaced": lambda p: _replace(Path(f"{p}-spool")),
    "directory moved": lambda p: _rename(p.parent),
    "a directory above moved": lambda p: _rename(p.parent.parent),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_under_the_referee_stops_the_next_batch(state: tuple[Store, Path], change: str) -> None:
    store, path = state
    CHANGES[change](path)
    with pytest.raises(StoreFailure, match=MOVED):
        store.record_many(tick(2.0))
    assert store.pending == 1  # the batch is not the journal's: the referee stops before publishing it


def test_what_the_referee_does_itself_stirs_nothing_that_fails(state: tuple[Store, Path]) -> None:
    """Its own spool writes, commits and checkpoints (which write the state
    file itself), and files made beside it, are no change of place."""
    store, path = state
    for i in range(50):
        store.record_many(tick(2.0 + i))
        store.settle()
    store.checkpoint()
    path.with_name("backup.db").write_bytes(b"")
    store.record_many(tick(99.0))
    assert store.pending == 1


def test_with_inotify_a_quiet_batch_costs_no_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    assert store._place is not None and store._place.notified
    store.record_many(tick(1.0))  # what the set-up stirred is read
    calls: list[object] = []
    real = os.stat

    def counted(p: Any, *a: Any, **k: Any) -> os.stat_result:
        calls.append(p)
        return real(p, *a, **k)

    monkeypatch.setattr(os, "stat", counted)
    for i in range(20):
        store.record_many(tick(3.0 + i))
    assert calls == []
    os.truncate(path, 0)  # and a change is still seen, by a stat
    with pytest.raises(StoreFailure, match=MOVED):
        store.record_many(tick(50.0))
    assert calls
    store.close()


def _retarget(link: Path) -> None:
    """The link points at a copy of what it pointed at."""
    copy = link.resolve().with_name(link.resolve().name + "-copy")
    copy.write_bytes(link.resolve().read_bytes())
    link.unlink()
    link.symlink_to(copy)


def _elsewhere(link: Path) -> None:
    """The link to the directory points at another one."""
    link.unlink()
    link.symlink_to(link.parent)


LINKED: dict[str, Callable[[Path], None]] = {
    "the directory's link pointed elsewhere": _elsewhere,
    "the state file's link pointed at a copy": lambda d: _retarget(d / "state.db"),
    "the state file's link removed": lambda d: (d / "state.db").unlink(),
}


@pytest.mark.parametrize("change", list(LINKED))
def test_a_path_through_a_link_is_checked_by_stat_every_time(tmp_path: Path, change: str) -> None:
    """inotify watches what a link points at when the watch is made; the
    link changed later would go unseen."""
    real = tmp_path / "real"
    real.mkdir()
    if change.startswith("the directory"):
        (tmp_path / "via").symlink_to(real)
        directory = tmp_path / "via"
    else:
        Store(real / "state.db").close()
        directory = tmp_path / "files"
        directory.mkdir()
        (directory / "state.db").symlink_to(real / "state.db")
    store = Store(directory / "state.db")
    try:
        assert store._place is not None and not store._place.notified
        LINKED[change](directory)
        with pytest.raises(StoreFailure, match=MOVED):
            store.record_many(tick())
    finally:
        store.close()


def test_a_change_before_the_watches_were_made_is_seen_by_the_first_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spool replaced after the store opened it and before inotify
    watched anything raises no event: the first batch stats, and compares
    with the spool the store writes to."""
    path = tmp_path / "state.db"
    Store(path).close()
    watching = inplace._Notify.watching

    def replaced_before(db: Path, spool: Path) -> inplace._Notify | None:
        _replace(spool)
        return watching(db, spool)

    monkeypatch.setattr(inplace._Notify, "watching", staticmethod(replaced_before))
    store = Store(path)
    try:
        assert store._place is not None and store._place.notified
        with pytest.raises(StoreFailure, match=MOVED):
            store.record_many(tick())
    finally:
        store.close()


def test_a_store_nobody_closed_gives_its_inotify_instance_back(tmp_path: Path) -> None:
    """The kernel allows 128 inotify instances per user, all processes
    together: one held by a dropped store would be one fewer for a referee."""

    def inotify_fds() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # (listdir's own, gone)
                count += "inotify" in os.readlink(f"/proc/self/fd/{fd}")
        return count

    before = inotify_fds()
    stores = [Store(tmp_path / f"s{i}" / "state.db") for i in range(3)]
    assert inotify_fds() == before + 3
    for store in stores:
        os.close(store._spool)  # the rest of the store is dropped without close()
        store._db.close()
    del stores, store
    gc.collect()
    assert inotify_fds() == before


def test_a_reader_watches_nothing_and_a_closed_writer_records_nothing(tmp_path: Path) -> None:
    writer = Store(tmp_path / "state.db")
    writer.close()
    with pytest.raises(RuntimeError, match="closed or read-only"):
        writer.record_many(tick())
    reader = Store(tmp_path / "state.db", writer=False)
    assert reader._place is None
    with pytest.raises(RuntimeError, match="closed or read-only"):
        reader.record_many(tick())
    reader.close()
