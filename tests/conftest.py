"""The real mosquitto of the session (started by the first test that asks
for it), brokers of a test's own, a unique arena prefix per test, an
in-process referee factory; and the markers that say what a test starts,
put on every test whose fixtures start it: ``broker`` (a mosquitto),
``browser`` (Chromium), ``cluster`` (NATS). The fast loop deselects all
three; an unmarked test that tries to start one fails."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.net.mqtt import Broker
from salvo.referee.admission import Registry
from salvo.referee.service import Referee
from salvo.spec import crypto

import chromium
import mosquitto
from mosquitto import Mosquitto
from mqttkit import Recorder, Team, connect_team

#: marker -> the fixtures that start what it names; a test using one
#: (directly or through another fixture) gets the marker.
STARTED_BY: Final = {
    "broker": frozenset({"broker", "new_broker"}),
    "browser": frozenset({"browser"}),
    "cluster": frozenset({"cluster", "nats_server"}),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in STARTED_BY.items():
            if fixtures & used:
                item.add_marker(marker)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    # The markers must tell the truth: `pytest -m "not broker"` runs without
    # a broker, so a test that is not marked may not start one.
    mosquitto.may_start = item.get_closest_marker("broker") is not None
    chromium.may_start = item.get_closest_marker("browser") is not None


#: The checkout, which no test may write into (caches aside).
CHECKOUT: Final = Path(__file__).resolve().parent.parent
_CACHES: Final = (".pytest_cache/", ".hypothesis/", ".mypy_cache/", ".ruff_cache/", ".import_linter_cache/")


def _untracked() -> set[str] | None:
    """What git sees in the checkout beyond its files (None: not a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(CHECKOUT), "status", "--porcelain", "--ignored", "--untracked-files=normal"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line[3:] for line in out.splitlines() if line[:2] in ("??", "!!") and not line[3:].startswith(_CACHES)}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # once, in the controlling process
        session.config.stash[_BEFORE] = _untracked()


def pytest_sessionfinish(session: pytest.Session) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None or os.environ.get("SALVO_DOC_SCREENSHOTS"):  # (that one writes docs/ on purpose)
        return
    if new := sorted((_untracked() or set()) - before):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nThe tests wrote into the checkout {CHECKOUT}: {new} (use tmp_path)", file=sys.stderr)


_BEFORE: Final = pytest.StashKey[set[str] | None]()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    mosq = Mosquitto(tmp_path_factory.mktemp("mosquitto"))
    mosq.start()
    yield mosq
    mosq.stop()


BrokerFactory = Callable[..., Mosquitto]


@pytest.fixture
def new_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """``new_broker("name", users=..., persistence=...)``: a mosquitto of the
    test's own, not started yet (a test may change its files first), stopped
    after the test: for tests that restart, reload or reconfigure it."""
    made: list[Mosquitto] = []

    def make(name: str = "broker", **kw: Any) -> Mosquitto:
        mosq = Mosquitto(tmp_path / name, **kw)
        made.append(mosq)
        return mosq

    yield make
    for mosq in made:
        mosq.stop()


@pytest.fixture
def prefix() -> str:
    """A fresh arena prefix: tests never see each other's retained topics."""
    return f"t{uuid.uuid4().hex[:12]}"


RefereeFactory = Callable[..., Referee]


@pytest.fixture
def start_referee(broker: Mosquitto, prefix: str, tmp_path: Path) -> Iterator[RefereeFactory]:
    """Start a referee on this test's prefix: ``start_referee(turn_timeout=1)``."""
    started: list[Referee] = []

    def start(
        *, prefixes: list[str] | None = None, seed: int = 1, registry: Registry | None = None, **config: Any
    ) -> Referee:
        key = crypto.load_or_create_referee_key(tmp_path / "referee.key")
        arenas = make_arenas(prefixes or [prefix], Config(**config), seed, key)
        ref = Referee(
            arenas,
            Broker.from_url(broker.url("referee")),
            client_id=f"ref-{uuid.uuid4().hex[:8]}",
            registry=registry,
        )
        ref.start()
        started.append(ref)
        assert ref.wait_connected(10), "referee did not connect"
        return ref

    yield start
    for ref in started:
        ref.stop()


@pytest.fixture
def watcher(broker: Mosquitto, prefix: str) -> Iterator[Recorder]:
    """Sees every topic of this test's arena, with the referee's rights."""
    rec = Recorder(broker, "referee", [f"/{prefix}/#"])
    yield rec
    rec.close()


TeamFactory = Callable[..., Team]


@pytest.fixture
def make_team(broker: Mosquitto, prefix: str) -> Iterator[TeamFactory]:
    """``make_team(name, secret=None, login=None)``: the suite's scripted team
    in this test's arena (see mqttkit.connect_team)."""
    teams: list[Team] = []

    def make(name: str, **kw: Any) -> Team:
        team = connect_team(broker, prefix, name, **kw)
        teams.append(team)
        return team

    yield make
    for team in teams:
        team.conn.close()


@pytest.fixture(autouse=True)
def _no_sdk_client_outlives_its_test(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every SalvoClient a test made is closed when it ends: one left behind
    (in a thread still waiting for its next assignment, say) retries the
    broker its test stopped for the rest of the session, and its log lines
    land in other tests' captures."""
    from salvo.sdk.client import SalvoClient

    made: list[SalvoClient] = []
    original = SalvoClient.__init__

    def init(self: SalvoClient, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SalvoClient, "__init__", init)
    yield
    for client in made:
        client.close()
