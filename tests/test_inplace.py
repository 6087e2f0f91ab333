"""The journal's check before each batch is published (salvo.arena.inplace):
a state file or spool deleted, emptied or replaced under the referee, or a
directory on the way moved, stops the batch. Proven both ways: by inotify
(one poll() a batch) and by the stat() it falls back to."""

from __future__ import annotations

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


CHANGES: dict[str, Callable[[Path], None]] = {
    "state file deleted": lambda p: p.unlink(),
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


def test_a_path_through_a_link_is_checked_by_stat_every_time(tmp_path: Path) -> None:
    """inotify follows a link once; a link changed later would go unseen."""
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    store = Store(tmp_path / "via" / "state.db")
    try:
        assert store._place is not None and not store._place.notified
        (tmp_path / "via").unlink()
        (tmp_path / "via").symlink_to(tmp_path)  # the same name, another directory
        with pytest.raises(StoreFailure, match=MOVED):
            store.record_many(tick())
    finally:
        store.close()


def test_a_reader_watches_nothing(tmp_path: Path) -> None:
    Store(tmp_path / "state.db").close()
    reader = Store(tmp_path / "state.db", writer=False)
    assert reader._place is None
    with pytest.raises(RuntimeError, match="read-only"):
        reader.record_many(tick())
    reader.close()
