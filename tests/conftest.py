"""The real mosquitto of the session (started by the first test that asks
for it), brokers of a test's own, a unique arena prefix per test, an
in-process referee factory; and the ``mqtt`` marker, put on every test
whose fixtures start a broker."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.net.mqtt import Broker
from salvo.referee.admission import Registry
from salvo.referee.service import Referee
from salvo.spec import crypto

import mosquitto
from mosquitto import Mosquitto
from mqttkit import Recorder, Team, connect_team

#: The fixtures that start a mosquitto; a test using one (directly or through
#: another fixture) is marked ``mqtt``.
BROKER_FIXTURES = frozenset({"broker", "new_broker"})


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.mqtt)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    # The marker must tell the truth: `pytest -m "not mqtt"` runs without a
    # broker, so a test that is not marked may not start one.
    mosquitto.may_start = item.get_closest_marker("mqtt") is not None


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
