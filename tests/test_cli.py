"""The salvo CLI: help, usage errors and exit codes, and the real referee
process's signal handling and last will."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from salvo.cli import ExitCode, main

from mosquitto import Mosquitto
from mqttkit import Recorder


def test_help_lists_commands_and_comes_from_docstrings() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "referee" in result.output
    result = CliRunner().invoke(main, ["referee", "--help"])
    assert result.exit_code == 0
    assert "single source of truth" in result.output
    for option in (
        "--placement-timeout",
        "--turn-timeout",
        "--reset-after",
        "--min-players",
        "--max-players",
        "--max-missed-turns",
        "--seed",
        "--prefix",
        "--username",
        "--password",
    ):
        assert option in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["referee", "--broker", "http://x"],
        ["referee", "--prefix", "a/b"],
        ["referee", "--prefix", "players"],
        ["referee", "--min-players", "5", "--max-players", "3"],
        ["referee", "--turn-timeout", "0"],
        ["referee", "--arenas", "a,a"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.USAGE, result.output


def test_unusable_key_file_exits_4(tmp_path: Path) -> None:
    bad = tmp_path / "key"
    bad.write_text("not base64 !!")
    result = CliRunner().invoke(main, ["referee", "--key-file", str(bad), "--broker", "mqtt://127.0.0.1:1"])
    assert result.exit_code == ExitCode.LOCAL_FILE, result.output
    assert "key file" in result.output


def test_unusable_state_file_exits_4(tmp_path: Path) -> None:
    bad = tmp_path / "state.db"
    bad.write_text("this is not an SQLite database, just text long enough to be read as one")
    result = CliRunner().invoke(
        main, ["referee", "--key-file", str(tmp_path / "k"), "--state", str(bad), "--broker", "mqtt://127.0.0.1:1"]
    )
    assert result.exit_code == ExitCode.LOCAL_FILE, result.output
    assert "state file" in result.output


@pytest.mark.mqtt
def test_refused_credentials_exit_3(broker: Mosquitto, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "referee",
            "--broker",
            f"mqtt://127.0.0.1:{broker.port}",
            "--username",
            "referee",
            "--password",
            "wrong",
            "--key-file",
            str(tmp_path / "k"),
            "--state",
            str(tmp_path / "state.db"),
        ],
    )
    assert result.exit_code == ExitCode.BROKER_REFUSED, result.output


def _spawn_referee(broker: Mosquitto, prefix: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SALVO_BROKER": broker.url("referee")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "salvo",
            "referee",
            "--prefix",
            prefix,
            "--key-file",
            str(tmp_path / "k"),
            "--state",
            str(tmp_path / "state.db"),
            "--client-id",
            f"cli-{prefix}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.mqtt
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_referee_cleanly_and_says_down(
    broker: Mosquitto, prefix: str, tmp_path: Path, sig: signal.Signals
) -> None:
    watch = Recorder(broker, "referee", [f"/{prefix}/game/server", f"/{prefix}/game/errors"])
    proc = _spawn_referee(broker, prefix, tmp_path)
    try:
        watch.wait_for(f"/{prefix}/game/server", "up", timeout=15)
        watch.publish(f"/{prefix}/game/request_participation", b"garbage")
        watch.wait_for(f"/{prefix}/game/errors")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    down = watch.wait_for(f"/{prefix}/game/server", "down")
    assert down.retain
    assert f"received {sig.name}" in out
    assert "connected to" in out
    # every rejected message is logged on one readable line
    assert f"reject join /{prefix}/game/request_participation: malformed:" in out


@pytest.mark.mqtt
def test_killed_referee_leaves_its_last_will(broker: Mosquitto, prefix: str, tmp_path: Path) -> None:
    watch = Recorder(broker, None, [f"/{prefix}/game/server"])
    proc = _spawn_referee(broker, prefix, tmp_path)
    try:
        watch.wait_for(f"/{prefix}/game/server", "up", timeout=15)
        proc.kill()
        proc.wait(10)
        assert watch.wait_for(f"/{prefix}/game/server", "down", timeout=10).retain
    finally:
        proc.kill()
        watch.close()
