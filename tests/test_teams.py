"""Team provisioning: mosquitto accepts the password lines we write, and a
referee with --teams admits only registered teams with their secret."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from click.testing import CliRunner
from paho.mqtt.enums import CallbackAPIVersion

from salvo.cli import main
from salvo.teams import Registry, TeamRefused, add_team, mosquitto_hash, mosquitto_verify, read_passwd

from conftest import RefereeFactory
from mosquitto import Mosquitto
from mqttkit import Recorder, Team


def test_hash_matches_mosquitto_passwd_format() -> None:
    # A line mosquitto_passwd wrote for password "secret" (mosquitto 2.0.11).
    theirs = (
        "$7$101$Xz/N5ESYtg2FdUDO$"
        "IL4igdDim6BS75wBIv/E6xcXnaawzyWtG++PV5XxUSTBoM0tZLNRJD0sU/oR7esGKhBkQFp+OmnYqCcjMtmDDQ=="
    )
    assert mosquitto_verify("secret", theirs)
    assert not mosquitto_verify("Secret", theirs)
    ours = mosquitto_hash("pw")
    assert ours.startswith("$7$101$") and mosquitto_verify("pw", ours)
    assert mosquitto_hash("pw") != ours  # salted


def _connect(port: int, user: str, password: str) -> int:
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.username_pw_set(user, password)
    try:
        return int(client.connect("127.0.0.1", port).value) or _connack(client)
    finally:
        client.disconnect()


def _connack(client: paho.Client) -> int:
    codes: list[int] = []
    client.on_connect = lambda _c, _u, _f, rc, _p: codes.append(rc.value)
    for _ in range(50):
        client.loop(0.1)
        if codes:
            return codes[0]
    raise TimeoutError("no CONNACK")


def test_mosquitto_accepts_the_password_file_we_write(tmp_path: Path) -> None:
    mosq = Mosquitto(tmp_path / "broker", users={"referee": "referee-pw"})
    card = add_team(tmp_path / "teams.json", mosq.passwd, "zed")
    assert set(read_passwd(mosq.passwd)) == {"referee", "zed"}  # mosquitto_passwd's line kept
    mosq.start()
    try:
        assert _connect(mosq.port, "zed", card.mqtt_password) == 0
        assert _connect(mosq.port, "zed", card.mqtt_password + "x") != 0
        assert _connect(mosq.port, "referee", "referee-pw") == 0
    finally:
        mosq.stop()


def test_teams_cli_add_list_remove(tmp_path: Path) -> None:
    runner = CliRunner()
    files = ["--registry", str(tmp_path / "teams.json"), "--passwd", str(tmp_path / "passwd")]
    added = runner.invoke(main, ["teams", "add", "ada", *files, "--broker-url", "mqtt://night.local:1883"])
    assert added.exit_code == 0, added.output
    assert "MQTT username: ada" in added.output and "mqtt://night.local:1883" in added.output
    secret = next(line.split()[-1] for line in added.output.splitlines() if line.startswith("game secret:"))
    Registry(tmp_path / "teams.json").verify("ada", secret)
    with pytest.raises(TeamRefused, match="wrong secret"):
        Registry(tmp_path / "teams.json").verify("ada", secret + "x")
    assert secret not in (tmp_path / "teams.json").read_text()  # only the hash is stored
    assert (tmp_path / "teams.json").stat().st_mode & 0o077 == 0

    again = runner.invoke(main, ["teams", "add", "ada", *files])
    assert again.exit_code == 1 and "exists already" in again.output
    bad = runner.invoke(main, ["teams", "add", "a/b", *files])
    assert bad.exit_code == 1 and "team name" in bad.output

    listed = runner.invoke(main, ["teams", "list", *files])
    assert "ada" in listed.output and "1 teams" in listed.output
    removed = runner.invoke(main, ["teams", "remove", "ada", *files])
    assert removed.exit_code == 0
    assert json.loads((tmp_path / "teams.json").read_text())["teams"] == {}
    assert "ada" not in read_passwd(tmp_path / "passwd")


def test_referee_admits_only_registered_teams_with_their_secret(
    broker: Mosquitto,
    prefix: str,
    tmp_path: Path,
    start_referee: RefereeFactory,
    make_team: Callable[..., Team],
    watcher: Recorder,
) -> None:
    registry_file = tmp_path / "teams.json"
    for name in ("alice", "carol"):
        add_team(registry_file, tmp_path / "passwd", name, secret=f"{name}-secret")
    start_referee(registry=Registry(registry_file))
    P = f"/{prefix}"

    alice = make_team("alice")
    alice.join()
    watcher.wait_for(f"{P}/players/list", '["alice"]')

    bob = make_team("bob")  # a broker login, but not in this tournament
    bob.join()
    refused = watcher.wait_for(f"{P}/players/bob/error").json()
    assert "not a registered team" in refused["error"]

    carol = make_team("carol", secret="guessed")
    carol.join()
    refused = watcher.wait_for(f"{P}/players/carol/error").json()
    assert refused["error"] == "wrong secret for team 'carol'"
    assert watcher.latest(f"{P}/players/list") is not None
    assert watcher.latest(f"{P}/players/list").payload == b'["alice"]'  # type: ignore[union-attr]

    # Registered during the evening: no restart needed.
    add_team(registry_file, tmp_path / "passwd", "dave", secret="dave-secret")
    make_team("dave").join()
    watcher.wait_for(f"{P}/players/list", '["alice","dave"]')
