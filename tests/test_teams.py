"""Team provisioning: mosquitto accepts the password lines we write, and a
referee with --teams admits only registered teams with their secret."""

from __future__ import annotations

import base64
import json
import secrets
import shlex
import subprocess
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from click.testing import CliRunner
from paho.mqtt.enums import CallbackAPIVersion

from salvo.cli import main
from salvo.organiser.teams import add_team, mosquitto_hash, read_passwd, render_acl
from salvo.organiser.tls import certificate_fingerprint
from salvo.referee.admission import Registry
from salvo.spec.errors import Rejection

from conftest import BrokerFactory, RefereeFactory, TeamFactory
from mosquitto import Mosquitto
from mqttkit import Recorder


def mosquitto_verify(password: str, encoded: str) -> bool:
    """Does ``password`` match a mosquitto_passwd line's hash (the check
    mosquitto makes)? Only the tests need it: salvo writes hashes, the
    broker checks them."""
    try:
        _, kind, iterations, salt, _digest = encoded.split("$")
        if kind != "7":
            return False
        expected = mosquitto_hash(password, base64.b64decode(salt), int(iterations))
    except ValueError:
        return False
    return secrets.compare_digest(expected, encoded)


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


def test_mosquitto_accepts_the_password_file_we_write(new_broker: BrokerFactory, tmp_path: Path) -> None:
    mosq = new_broker(users={"referee": "referee-pw"})
    card = add_team(tmp_path / "teams.json", mosq.passwd, "zed")
    assert set(read_passwd(mosq.passwd)) == {"referee", "zed"}  # mosquitto_passwd's line kept
    mosq.start()
    assert _connect(mosq.port, "zed", card.mqtt_password) == 0
    assert _connect(mosq.port, "zed", card.mqtt_password + "x") != 0
    assert _connect(mosq.port, "referee", "referee-pw") == 0


def test_teams_cli_add_list_remove(tmp_path: Path) -> None:
    runner = CliRunner()
    files = ["--registry", str(tmp_path / "teams.json"), "--passwd", str(tmp_path / "passwd")]
    added = runner.invoke(main, ["teams", "add", "ada", *files, "--broker-url", "mqtt://night.local:1883"])
    assert added.exit_code == 0, added.output
    assert "MQTT username: ada" in added.output and "mqtt://night.local:1883" in added.output
    secret = next(line.split()[-1] for line in added.output.splitlines() if line.startswith("game secret:"))
    Registry(tmp_path / "teams.json").verify("ada", secret)
    with pytest.raises(Rejection, match="wrong secret"):
        Registry(tmp_path / "teams.json").verify("ada", secret + "x")
    assert secret not in (tmp_path / "teams.json").read_text()  # only the hash is stored
    assert (tmp_path / "teams.json").stat().st_mode & 0o077 == 0

    again = runner.invoke(main, ["teams", "add", "ada", *files])
    assert again.exit_code == 1 and "exists already" in again.output
    bad = runner.invoke(main, ["teams", "add", "a/b", *files])
    assert bad.exit_code == 1 and "team name" in bad.output

    listed = runner.invoke(main, ["teams", "list", *files])
    assert "ada" in listed.output and "1 teams" in listed.output
    # The broker's ACL beside the password file follows every change.
    acl = tmp_path / "mosquitto.acl"
    assert acl.read_text() == render_acl(["ada"]) and "kill -s HUP mosquitto" in added.output
    removed = runner.invoke(main, ["teams", "remove", "ada", *files])
    assert removed.exit_code == 0
    assert json.loads((tmp_path / "teams.json").read_text())["teams"] == {}
    assert "ada" not in read_passwd(tmp_path / "passwd")
    assert acl.read_text() == render_acl()


def test_acl_follows_the_password_file(tmp_path: Path) -> None:
    passwd, acl = tmp_path / "broker" / "passwd", tmp_path / "elsewhere.acl"
    runner = CliRunner()
    referee = runner.invoke(main, ["teams", "referee", "--passwd", str(passwd), "--acl", str(acl)])
    assert referee.exit_code == 0, referee.output
    assert acl.read_text() == render_acl() and not (passwd.parent / "mosquitto.acl").exists()
    add_team(tmp_path / "teams.json", passwd, "ada", acl=acl)
    assert acl.read_text() == render_acl(["ada"])
    # the broker reads both as their owner; 2.0.16+ warns about (2.1 refuses) files others may read
    assert acl.stat().st_mode & 0o777 == 0o600 and passwd.stat().st_mode & 0o777 == 0o600
    # Logins made with mosquitto_passwd by hand: `salvo teams acl` catches up.
    for user in ("bletchley", "bad+name"):
        subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, "pw"], check=True, capture_output=True)
    made = runner.invoke(main, ["teams", "acl", "--passwd", str(passwd), "--acl", str(acl)])
    assert made.exit_code == 0, made.output
    assert acl.read_text() == render_acl(["ada", "bletchley"])
    assert "'bad+name' cannot be a team name" in made.output
    assert "user referee\ntopic readwrite #" in acl.read_text() and "user bad+name" not in acl.read_text()
    missing = runner.invoke(main, ["teams", "acl", "--passwd", str(tmp_path / "nope")])
    assert missing.exit_code != 0 and "no password file" in missing.output


def test_card_carries_the_tls_url_and_the_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    made = runner.invoke(
        main, ["tls", "--dir", str(tmp_path / "tls"), "--broker-dir", str(tmp_path / "broker"), "--host", "night.local"]
    )
    assert made.exit_code == 0, made.output
    fingerprint = certificate_fingerprint(tmp_path / "tls" / "ca.crt")
    assert f"CA SHA-256:  {fingerprint}" in made.output
    files = ["--registry", str(tmp_path / "teams.json"), "--passwd", str(tmp_path / "passwd")]
    # The CA is found where `salvo tls` put it, next to the password file.
    added = runner.invoke(main, ["teams", "add", "ada", *files, "--broker-url", "mqtts://night.local:8883"])
    assert added.exit_code == 0, added.output
    card = dict(line.split(":", 1) for line in added.output.splitlines() if ":" in line and not line.startswith(" "))
    assert card["broker"].strip() == "mqtts://night.local:8883"
    assert card["CA file"].strip().startswith("ca.crt")
    assert card["CA SHA-256"].strip() == fingerprint
    # The line to try: the tournament's (it goes wherever the director
    # assigns), then free play in an arena the referee runs. A team runs it
    # where it keeps the ca.crt it was handed.
    monkeypatch.chdir(tmp_path / "tls")
    env, args = _bot_line(card["try it"])
    assert " ".join(args) == (
        "bot --tournament --broker mqtts://night.local:8883 --ca-file ca.crt --username ada --name ada"
    )
    password = card["MQTT password"].strip()
    assert env == {"SALVO_PASSWORD": password, "SALVO_SECRET": card["game secret"].strip()}
    env, args = _bot_line(card["free play"])
    assert args[:3] == ["bot", "--prefix", "arena1"] and "--name" in args
    # A plain URL: no CA on the card, and a warning for the organiser.
    plain = runner.invoke(main, ["teams", "add", "bo", *files, "--broker-url", "mqtt://night.local:1883"])
    assert plain.exit_code == 0 and "CA file" not in plain.output and "plain text" in plain.output
    # Arenas named in the ACL: the free-play line uses the first of them.
    named = runner.invoke(main, ["teams", "acl", "--passwd", str(tmp_path / "passwd"), "--arenas", "finals,semis"])
    assert named.exit_code == 0, named.output
    added = runner.invoke(main, ["teams", "add", "cy", *files, "--broker-url", "mqtts://night.local:8883"])
    free_play = next(line for line in added.output.splitlines() if line.startswith("free play:"))
    assert _bot_line(free_play.split(":", 1)[1])[1][:3] == ["bot", "--prefix", "finals"]


def _bot_line(line: str) -> tuple[dict[str, str], list[str]]:
    """A card's ``salvo bot`` line: its environment (the secrets: never on the
    command line, which ``ps`` shows) and its arguments, which the real
    ``salvo bot`` takes."""
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    args = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
    assert args[0] == "salvo" and "--password" not in args and "--secret" not in args, line
    bot = main.commands["bot"]
    bot.make_context("bot", args[2:], obj=None, default_map={"secret": "s"})  # parses: every option exists
    return env, args[1:]


def test_team_added_to_a_running_broker_plays_after_sighup(new_broker: BrokerFactory, tmp_path: Path) -> None:
    mosq = new_broker(users={"referee": "referee-pw"})
    mosq.start()
    runner = CliRunner()
    files = ["--registry", str(tmp_path / "teams.json"), "--passwd", str(mosq.passwd)]
    added = runner.invoke(main, ["teams", "add", "zed", *files, "--broker-url", mosq.tls_url()])
    assert added.exit_code == 0, added.output
    password = next(line.split()[-1] for line in added.output.splitlines() if line.startswith("MQTT password:"))
    mosq.users["zed"] = password
    mosq.reload()
    zed = Recorder(mosq, "zed", ["/game/state"])  # over the plain listener: same logins, same ACL
    referee = Recorder(mosq, "referee", [])
    try:
        assert zed.publish("/game/request_participation", "{}") < 0x80
        referee.publish("/game/state", "lobby")
        zed.wait_for("/game/state", "lobby")
    finally:
        zed.close()
        referee.close()


def test_referee_admits_only_registered_teams_with_their_secret(
    broker: Mosquitto,
    prefix: str,
    tmp_path: Path,
    start_referee: RefereeFactory,
    make_team: TeamFactory,
    watcher: Recorder,
) -> None:
    registry_file = tmp_path / "teams.json"
    for name in ("alice", "carol"):
        add_team(registry_file, tmp_path / "passwd", name, secret=f"{name}-secret-for-tests")
    start_referee(registry=Registry(registry_file))
    P = f"/{prefix}"

    alice = make_team("alice")
    alice.join()
    watcher.wait_for(f"{P}/players/list", '["alice"]')

    bob = make_team("bob")  # a broker login, but not in this tournament
    bob.join(request_id="bob-1")
    refused = watcher.wait(lambda m: m.topic == f"{P}/game/errors" and b"bob-1" in m.payload).json()
    assert refused["code"] == "not_registered" and "not a registered team" in refused["error"]

    carol = make_team("carol", secret="guessed")
    carol.join(request_id="carol-1")
    refused = watcher.wait(lambda m: m.topic == f"{P}/game/errors" and b"carol-1" in m.payload).json()
    assert refused == {
        "topic": f"{P}/game/request_participation",
        "error": "wrong secret for team 'carol'",
        "code": "wrong_secret",
        "request_id": "carol-1",
    }
    # refusals never go to a team's own error topic: the sender proved nothing
    watcher.sync(f"{P}/sync")
    assert not watcher.on(f"{P}/players/carol/error") and not watcher.on(f"{P}/players/bob/error")
    assert watcher.text(f"{P}/players/list") == '["alice"]'

    # Registered during the evening: no restart needed.
    add_team(registry_file, tmp_path / "passwd", "dave", secret="dave-secret-for-tests")
    make_team("dave").join()
    watcher.wait_for(f"{P}/players/list", '["alice","dave"]')


def test_json_card_and_tls_json_are_all_a_client_needs(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """``salvo tls --json`` says what it made; ``salvo teams add --json`` is
    the card as JSON: a client configured from it alone (URL, login, CA file
    named on the card, its fingerprint checked) connects over TLS and plays."""
    runner = CliRunner()
    made = runner.invoke(
        main,
        ["tls", "--dir", str(tmp_path / "tls"), "--broker-dir", str(tmp_path / "b"), "--host", "h.local", "--json"],
    )
    assert made.exit_code == 0, made.output
    issued = json.loads(made.stdout)
    assert issued["new_ca"] is True and set(issued["hosts"]) >= {"h.local", "localhost", "127.0.0.1"}
    assert issued["ca_sha256"] == certificate_fingerprint(Path(issued["ca_file"]))
    assert all(Path(issued[k]).is_file() for k in ("ca_file", "ca_key", "server_cert", "server_key"))

    mosq = new_broker(users={"referee": "referee-pw"})
    mosq.start()
    files = ["--registry", str(tmp_path / "teams.json"), "--passwd", str(mosq.passwd), "--ca-file", str(mosq.ca_file)]
    added = runner.invoke(main, ["teams", "add", "zed", *files, "--broker-url", mosq.tls_url(), "--json"])
    assert added.exit_code == 0, added.output
    card = json.loads(added.stdout)  # notes go to stderr: stdout is the JSON alone
    assert card == {
        "card": 1,
        "team": "zed",
        "brokers": [mosq.tls_url()],
        "tls": True,
        "username": "zed",
        "mqtt_password": card["mqtt_password"],
        "secret": card["secret"],
        "ca_file": mosq.ca_file.name,
        "ca_sha256": certificate_fingerprint(mosq.ca_file),
        "arena": "arena1",
        "tournament": "/tournament/assignments/zed",
        "protocol": "2.1",
    }
    assert len(card["secret"]) >= 16 and Registry(tmp_path / "teams.json").teams["zed"]
    mosq.users["zed"] = card["mqtt_password"]
    mosq.reload()
    # a team's automation: the CA file it was handed (named on the card), checked against the card
    ca_file = mosq.ca_file.parent / card["ca_file"]
    assert certificate_fingerprint(ca_file) == card["ca_sha256"]
    host, port = card["brokers"][0].removeprefix("mqtts://").rsplit(":", 1)
    referee = Recorder(mosq, "referee", [])
    referee.publish(f"/{card['arena']}/game/state", "lobby", retain=True)
    zed = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    zed.tls_set(ca_certs=str(ca_file))
    zed.username_pw_set(card["username"], card["mqtt_password"])
    got: list[bytes] = []
    zed.on_message = lambda _c, _u, msg: got.append(bytes(msg.payload))
    try:
        assert zed.connect(host, int(port)) == 0
        zed.subscribe(f"/{card['arena']}/game/state", qos=1)
        zed.loop_start()
        assert referee.wait_until(lambda: got == [b"lobby"], 10), got
    finally:
        zed.loop_stop()
        zed.disconnect()
        referee.close()
