"""Session-wide real mosquitto, a unique arena prefix per test, and an
in-process referee factory."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from salvo import crypto
from salvo.engine import Config
from salvo.mqtt import Broker
from salvo.referee import Referee, make_arenas
from salvo.teams import Registry

from mosquitto import Mosquitto
from mqttkit import Recorder, Team


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    mosq = Mosquitto(tmp_path_factory.mktemp("mosquitto"))
    mosq.start()
    yield mosq
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


@pytest.fixture
def make_team(broker: Mosquitto, prefix: str) -> Iterator[Callable[..., Team]]:
    teams: list[Team] = []

    def make(name: str, **kw: Any) -> Team:
        team = Team(broker, prefix, name, **kw)
        teams.append(team)
        return team

    yield make
    for team in teams:
        team.close()
