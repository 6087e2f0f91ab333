"""docker-compose.yml and the Dockerfile, tested without a Docker engine:
the wiring is read from the YAML, and the exact command the referee
container runs is executed natively against a real mosquitto."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML has no inline types; types-PyYAML is no test dependency

from salvo.localbroker import free_port
from salvo.mqtt import Broker
from salvo.teams import add_team
from salvo.watch import Recorder, wait_until

from conftest import BrokerFactory
from mosquitto import ROOT

COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _expand(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} interpolation."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", one, text)


def test_broker_service_matches_mosquitto_conf() -> None:
    conf = (ROOT / "mosquitto.conf").read_text()
    broker = COMPOSE["services"]["mosquitto"]
    assert broker["image"].startswith("eclipse-mosquitto:2")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"]}
    # passwd, ACL and certificates live in the data directory, mounted whole
    # (salvo replaces those files atomically: a single-file mount would keep the old one)
    assert mounts["/data"] == "./data"
    for key in ("password_file", "acl_file", "cafile", "certfile", "keyfile"):
        path = re.search(rf"^{key} (\S+)$", conf, re.MULTILINE)
        assert path and path.group(1).startswith("/data/"), f"{key} is not in the mounted data directory"
    assert mounts["/mosquitto/config/mosquitto.conf"] == "./mosquitto.conf"
    assert re.search(r"^persistence_location /mosquitto/data/$", conf, re.MULTILINE)
    assert "mosquitto-data" in mounts.get("/mosquitto/data", "")
    # teams reach TLS only; plain MQTT is published on the host's loopback only; no websockets
    assert set(broker["ports"]) == {"8883:8883", "127.0.0.1:1883:1883"}
    assert "websockets" not in conf


def test_services_reach_the_broker_and_keep_state_on_the_volume() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["salvo"]' in dockerfile and "WORKDIR /data" in dockerfile
    for name in ("referee", "tournament", "bots"):
        svc = COMPOSE["services"][name]
        assert svc["build"] == "."
        assert svc["environment"]["SALVO_BROKER"] == "mqtt://mosquitto:1883"
        assert "mosquitto" in svc["depends_on"] or "referee" in svc["depends_on"]
    for name in ("referee", "tournament"):
        svc = COMPOSE["services"][name]
        assert "./data:/data" in svc["volumes"]
        assert svc["environment"]["SALVO_USERNAME"] == "referee"
        assert all(not a.startswith("/") or a.startswith("/data/") for a in svc["command"])
    assert COMPOSE["services"]["bots"]["profiles"] == ["bots"]


def test_the_referee_container_command_runs_natively(new_broker: BrokerFactory, tmp_path: Path) -> None:
    mosq = new_broker(users={"referee": "referee-pw"})
    data = tmp_path / "data"
    card = add_team(data / "teams.json", mosq.passwd, "ada")
    mosq.start()
    svc = COMPOSE["services"]["referee"]
    env = {"SALVO_PASSWORD": "referee-pw"}
    with pytest.raises(KeyError, match="SALVO_PASSWORD"):
        _expand(str(svc["environment"]["SALVO_PASSWORD"]), {})  # compose refuses to start without it
    # The container's world, mapped onto this machine: /data and the broker's name.
    container_env = {k: _expand(str(v), env) for k, v in svc["environment"].items()}
    container_env["SALVO_BROKER"] = container_env["SALVO_BROKER"].replace("mosquitto:1883", f"127.0.0.1:{mosq.port}")
    container_env = {k: v.replace("/data", str(data)) for k, v in container_env.items()}
    args = [_expand(a, env).replace("/data", str(data)) for a in svc["command"]]
    proc = subprocess.Popen(
        [sys.executable, "-m", "salvo", *args],
        cwd=data,  # the image's WORKDIR
        env={**os.environ, **container_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    watch = Recorder(Broker.from_url(mosq.url("referee")), ["/arena1/#", "/arena2/game/server"])
    try:
        watch.wait_for("/arena1/game/server", "up", timeout=30)
        watch.wait_for("/arena2/game/server", "up", timeout=10)
        team = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials("ada", card.mqtt_password)
        from salvo.client import SalvoClient

        client = SalvoClient("ada", card.secret, team, prefix="arena1").connect()
        client.join()
        watch.wait_for("/arena1/players/list", '["ada"]')
        client.close()
        assert (data / "salvo-referee.db").exists() and (data / "salvo-referee.key").exists()
    finally:
        watch.close()
        proc.terminate()
        out = proc.communicate(timeout=15)[0].decode()
    assert proc.returncode == 0, out
    assert "admitting only the 1 teams" in out


def test_the_spectate_container_command_serves_the_page() -> None:
    svc = COMPOSE["services"]["spectate"]
    args = list(svc["command"])
    assert args[0] == "spectate" and args[args.index("--host") + 1] == "0.0.0.0"
    port = args[args.index("--port") + 1]
    assert f"{port}:{port}" in svc["ports"]
    # The page never speaks MQTT: the spectate server reads the broker over
    # the compose network and streams to browsers (server-sent events).
    assert svc["environment"]["SALVO_BROKER"] == "mqtt://mosquitto:1883"
    assert "mosquitto" in svc["depends_on"]
    free = str(free_port())
    args[args.index("--port") + 1] = free
    proc = subprocess.Popen([sys.executable, "-m", "salvo", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    body: list[bytes] = []

    def served() -> bool:
        try:
            body.append(urllib.request.urlopen(f"http://127.0.0.1:{free}/", timeout=2).read())
        except OSError:
            return False  # not listening yet
        return True

    try:
        wait_until(served, what="the page served")
        assert b"<title>salvo" in body[0] and b"new EventSource(" in body[0]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode()
    assert proc.returncode == 0, out
