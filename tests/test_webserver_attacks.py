"""The third review of the director's web server, attack by attack, against
a real server (a spectator server or the console, uvicorn on real sockets)
and, where the broker matters, the session's mosquitto with the shipped
configuration and a real referee. docs/security.md section 14 tells the
story; the flood figures come from tests/test_webserver_floods.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from salvo.mqtt import Broker
from salvo.spectate import SpectatorServer

from conftest import RefereeFactory
from mosquitto import Mosquitto
from mqttkit import Recorder, wait_until
from webkit import SSE, on


@pytest.fixture
def mallory(broker: Mosquitto) -> Iterator[Recorder]:
    """A registered team's login (it may write every fire topic)."""
    rec = Recorder(broker, "mallory", [])
    yield rec
    rec.close()


# -- 1. a junk flood copied to every spectator -----------------------------------------------------


def test_a_flood_of_error_reports_reaches_no_stream(
    broker: Mosquitto, start_referee: RefereeFactory, watcher: Recorder, mallory: Recorder, prefix: str
) -> None:
    """Junk at a fire topic makes the referee report on the public
    /game/errors, up to 200 a second; no page shows those reports, so the
    projector's stream carries none of them (before: every one, to every
    stream)."""
    p = f"/{prefix}"
    start_referee()
    watcher.wait_for(f"{p}/game/state", "lobby")
    server = SpectatorServer(("127.0.0.1", 0), Broker.from_url(broker.url())).start()
    stream = None
    try:
        wait_until(lambda: server.hub.snapshot().get(f"{p}/game/state") == "lobby", what="the lobby in the hub")
        stream = SSE(server.port)
        stream.until(on(f"{p}/game/state", "lobby"))  # the snapshot: what follows is live
        flood = 150  # within the referee's burst of reports: every one is published
        mark = watcher.mark()
        for i in range(flood):
            mallory.client.publish(f"{p}/players/bob/fire", f"junk {i}", qos=1)
        wait_until(lambda: len(watcher.on(f"{p}/game/errors", after=mark)) >= flood, what="the referee's reports")
        # Published after the broker sent every report on: the hub hears it after them.
        watcher.publish(f"{p}/game/current", "marker")
        seen = stream.until(on(f"{p}/game/current", "marker"))
        reports = [e for e in seen if e[0] == "message" and e[1]["topic"].endswith("/game/errors")]
        assert reports == [], f"{len(reports)} error reports streamed"
        assert f"{p}/game/errors" not in server.hub.snapshot()
    finally:
        if stream is not None:
            stream.close()
        server.close()
