"""The one mosquitto launcher (salvo.tools.localbroker.Mosquitto): the
tests' broker, the bench's and the fault runs' are all it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from paho.mqtt import publish

from salvo.net.mqtt import read_retained
from salvo.tools import localbroker
from salvo.tools.localbroker import Mosquitto

import mosquitto as shipped


def test_every_broker_of_the_project_is_the_one_launcher() -> None:
    assert issubclass(shipped.Mosquitto, Mosquitto)
    source = Path(localbroker.__file__).parent.parent
    launches = [p for p in source.rglob("*.py") if "mosquitto_binary(), " in p.read_text()]
    assert launches == [Path(localbroker.__file__)], launches


@pytest.mark.broker
def test_a_first_start_moves_off_a_taken_port_and_a_restart_keeps_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers there
        mosq = Mosquitto(tmp_path, persistence=True)
        mosq.ports = [taken.getsockname()[1]]
        try:
            mosq.start()
            port = mosq.port
            assert port != taken.getsockname()[1]
            publish.single("/kept", b"yes", qos=1, retain=True, hostname="127.0.0.1", port=port)
            mosq.restart()
            assert mosq.port == port
            got = read_retained(mosq.broker, ["/kept"], "/marker", timeout=10)
            assert got == {"/kept": b"yes"}  # persistence: kept across the restart
            mosq.reload()
        finally:
            mosq.stop()
    assert mosq.proc is None
