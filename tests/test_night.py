"""``salvo night``: the evening's referee as a container runs it, tested as a
real process against a real mosquitto (the engine's own run is
tests/test_compose_night.py). Its exit codes decide what Docker's
``restart: on-failure`` does, so each is checked: 143 when stopped (the
engine starts it again after a restart), 0 with the reason as the last line
when only the organiser can help (no restart loop), and its healthcheck
failing for a frozen process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from salvo.net.mqtt import Broker
from salvo.net.watch import Recorder, wait_until
from salvo.organiser.teams import add_team, write_acl_from_passwd

from conftest import BrokerFactory
from mosquitto import Mosquitto


def _env(mosq: Mosquitto, data: Path, **extra: str) -> dict[str, str]:
    """The compose file's environment for the referee service, with this
    broker and this data directory."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SALVO_")}
    return base | {
        "SALVO_BROKER": f"mqtt://127.0.0.1:{mosq.port}",
        "SALVO_USERNAME": "referee",
        "SALVO_PASSWORD": "referee-pw",
        "SALVO_TEAMS": str(data / "teams.json"),
        "SALVO_ACL": str(mosq.acl),
        "SALVO_ARENAS": "2",
        "SALVO_KEY_FILE": str(data / "referee.key"),
        "SALVO_STATE": str(data / "free-play.db"),
        "SALVO_TOURNAMENT_STATE": str(data / "tournament.json"),
        "SALVO_TOURNAMENT_REFEREE_STATE": str(data / "tournament-referee.db"),
        "SALVO_HEALTH_FILE": str(data / "night-health"),
        "SALVO_CONSOLE": "off",
        "SALVO_RESET_AFTER": "1",
        **extra,
    }


def _night(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "salvo", "night", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _health(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "salvo", "night", "health", *args], env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture
def night_broker(new_broker: BrokerFactory, tmp_path: Path) -> Mosquitto:
    mosq = new_broker(users={"referee": "referee-pw"})
    for team in ("ada", "bob"):
        add_team(tmp_path / "data" / "teams.json", mosq.passwd, team)
    write_acl_from_passwd(mosq.passwd, mosq.acl, ["arena1", "arena2"])
    mosq.start()
    return mosq


def test_free_play_runs_is_healthy_and_exits_143_when_stopped(night_broker: Mosquitto, tmp_path: Path) -> None:
    env = _env(night_broker, tmp_path / "data")
    assert _health(env).returncode == 1  # nothing runs yet
    proc = _night(env, "run")
    watch = Recorder(Broker.from_url(night_broker.url("referee")), ["/arena2/game/server"])
    try:
        watch.wait_for("/arena2/game/server", "up", timeout=30)
        wait_until(lambda: _health(env).returncode == 0, 15, "healthy")
        # frozen (a laptop lid, SIGSTOP): its loop stops reporting, the healthcheck says so
        proc.send_signal(signal.SIGSTOP)

        def frozen_said() -> bool:
            return "frozen" in _health(env, "--max-age", "2").stderr

        try:
            wait_until(frozen_said, 15, "the healthcheck failing for the frozen process")
        finally:
            proc.send_signal(signal.SIGCONT)
        wait_until(lambda: _health(env, "--max-age", "2").returncode == 0, 15, "healthy again")
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=10)[0]
    finally:
        watch.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out  # Docker's on-failure starts it after an engine restart
    assert "received SIGTERM" in out


def test_a_refusal_exits_0_with_the_reason_last(night_broker: Mosquitto, tmp_path: Path) -> None:
    """An arena the ACL does not open: Docker must not start it again in a
    loop, and the organiser reads why on the last line."""
    env = _env(night_broker, tmp_path / "data", SALVO_ARENAS="3")
    proc = _night(env, "run")
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    assert "stays stopped until the organiser acts" in out
    last = out.strip().splitlines()[-1]
    assert "opens arena1, arena2 to teams, not arena3" in last, out


def test_a_stop_at_once_after_the_start_is_not_lost(night_broker: Mosquitto, tmp_path: Path) -> None:
    """SIGTERM in the first moments, before the referee installs its own
    handlers: as a container's PID 1 it was ignored, and Docker killed the
    referee 10 s later (the walkthrough: 5 stops of 7 right after a start).
    Compose runs salvo under Docker's init now (never PID 1); and from its
    first line salvo night stops on it at once. Either way: gone at once,
    by the signal (-15 before Python handles signals at all, 143 after)."""
    env = _env(night_broker, tmp_path / "data")
    for delay in (0.0, 0.3, 0.6):  # before the imports are done, and while the referee starts
        proc = _night(env, "run")
        if delay:
            time.sleep(delay)  # (the moment, not a wait for a result)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=5)[0]
        assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), out


def test_a_missing_password_is_said_plainly(night_broker: Mosquitto, tmp_path: Path) -> None:
    env = _env(night_broker, tmp_path / "data", SALVO_PASSWORD="")
    proc = _night(env, "run")
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0 and "SALVO_PASSWORD is empty" in out.strip().splitlines()[-1], out


def test_free_play_clears_a_finished_tournaments_display(night_broker: Mosquitto, tmp_path: Path) -> None:
    """After the tournament, free play: the projector leaves the champion
    screen (the standings said done and stayed retained for ever). A
    tournament not done keeps its table; but no assignment stays, or a
    team's --tournament client would play a free-play game as its
    tournament game (the walkthrough's teams did, and counted it)."""
    env = _env(night_broker, tmp_path / "data")
    watch = Recorder(Broker.from_url(night_broker.url("referee")), ["/tournament/#", "/arena1/game/server"])
    try:
        watch.publish("/tournament/standings", '{"done": true, "table": []}', retain=True)
        watch.publish("/tournament/assignments/ada", '{"done": true}', retain=True)
        proc = _night(env, "run")
        try:
            watch.wait_for("/arena1/game/server", "up", timeout=30)
            watch.wait(lambda m: m.topic == "/tournament/standings" and not m.payload, timeout=10, what="cleared")
            watch.wait(lambda m: m.topic == "/tournament/assignments/ada" and not m.payload, timeout=10)
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
        # a tournament under way (left for free play) keeps its standings, not its assignments
        mark = watch.mark()
        watch.publish("/tournament/standings", '{"done": false, "table": []}', retain=True)
        watch.publish("/tournament/assignments/ada", '{"id": "3-2", "round": 2, "arena": "arena1"}', retain=True)
        proc = _night(env, "run")
        try:
            watch.wait_for("/arena1/game/server", "up", after=mark, timeout=30)
            watch.wait(lambda m: m.topic == "/tournament/assignments/ada" and not m.payload, after=mark, timeout=10)
            watch.sync("/tournament/marker")
            assert watch.text("/tournament/standings") == '{"done": false, "table": []}'
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
    finally:
        watch.close()


def test_the_tournament_keeps_serving_after_the_night(night_broker: Mosquitto, tmp_path: Path) -> None:
    """Under compose the director does not exit at the end (its console and
    projector keep the champion and the exports), and stays healthy."""
    from salvo.sdk.bots import make_strategy
    from salvo.sdk.follow import follow

    data = tmp_path / "data"
    env = _env(night_broker, data, SALVO_MODE="tournament", SALVO_TURN_TIMEOUT="5")
    cards = {}
    for name in ("ada", "bob"):  # fresh credentials for the two teams' clients
        cards[name] = add_team(data / "teams.json", night_broker.passwd, name, replace=True)
    write_acl_from_passwd(night_broker.passwd, night_broker.acl, ["arena1", "arena2"])
    night_broker.reload()
    proc = _night(env, "run")
    played: dict[str, int] = {}

    def team(name: str) -> None:
        broker = Broker.from_url(night_broker.url()).with_credentials(name, cards[name].mqtt_password)
        played[name] = follow(broker, name, cards[name].secret, lambda: make_strategy("random", name))

    bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in cards]
    for b in bots:
        b.start()
    try:
        for b in bots:
            b.join(120)
        assert played == {"ada": 1, "bob": 1}

        def status() -> str:
            args = ["tournament", "status", "--state", str(data / "tournament.json")]
            command = [sys.executable, "-m", "salvo", *args]
            return subprocess.run(command, env=env, capture_output=True, text=True, check=False).stdout

        # the director still answers (the walkthrough got "director not running" from one serving the night)
        wait_until(lambda: "OVER" in status(), 30, "the tournament over")
        assert "not running" not in status() and proc.poll() is None
        assert _health(env).returncode == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=15)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "the tournament is over: serving" in out
