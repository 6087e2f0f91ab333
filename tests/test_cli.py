"""The salvo CLI: help, usage errors and exit codes, and the real referee
process's signal handling and last will."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import salvo
from salvo.arena.journalformat import config_to_json, event_to_json
from salvo.cli import ExitCode, main
from salvo.failures import BrokerRefusal, Failure, LocalFailure
from salvo.game import defaults
from salvo.game.events import Config, Event, Result
from salvo.net.mqtt import Broker
from salvo.referee.batch import Fatal, Stop
from salvo.referee.bootstrap import failure_of, open_state
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, Driver
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


def test_the_version_is_the_installed_distribution_s() -> None:
    version = importlib.metadata.version("salvo")
    assert salvo.__version__ == version
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"salvo, version {version}\n"


def test_the_version_is_read_only_when_asked() -> None:
    """Every command paid for the package metadata at import: only
    ``--version`` reads it now, and still prints it."""
    code = "import sys, salvo.cli; print('importlib.metadata' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    done = subprocess.run([sys.executable, "-m", "salvo", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout == f"salvo, version {importlib.metadata.version('salvo')}\n"


def test_the_command_line_configures_logging_only_when_a_command_runs() -> None:
    """Importing the CLI imports no domain module (help stays fast) but the
    game's defaults (constants only: the options show them) and configures
    nothing."""
    code = (
        "import logging, sys, salvo.cli; "
        "assert not logging.getLogger().handlers; "
        "print(sorted(m for m in sys.modules if m.startswith('salvo.') and not m.startswith('salvo.cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['salvo.failures', 'salvo.game', 'salvo.game.defaults']"


@pytest.mark.parametrize(
    ("fatal", "failure"),
    [
        (Fatal(Stop.BROKER_REFUSED, "no"), BrokerRefusal),
        (Fatal(Stop.STATE, "disk full"), LocalFailure),
        (Fatal(Stop.ARENA_TAKEN, "taken"), LocalFailure),
        (Fatal(Stop.INTERNAL, "bug"), Failure),
    ],
)
def test_why_a_referee_stopped_is_a_failure_class(fatal: Fatal, failure: type[Failure]) -> None:
    got = failure_of(fatal)
    assert type(got) is failure and str(got) == fatal.reason
    assert failure_of(None) is None


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["teams", "acl", "--passwd", "{tmp}/nothing"], ExitCode.LOCAL_FILE, "no password file at"),
        (
            ["teams", "add", "ada", "--passwd", "{tmp}/passwd", "--registry", "{tmp}/t.json", "--ca-file", "{tmp}/ca"],
            ExitCode.LOCAL_FILE,
            "no CA file at",
        ),
        (
            ["teams", "remove", "ada", "--passwd", "{tmp}/passwd", "--registry", "{tmp}/t.json"],
            ExitCode.FAILED,
            "no team",
        ),
        (
            ["tournament", "run", "--console", "off", "--teams", "{tmp}/nothing.json"],
            ExitCode.LOCAL_FILE,
            "no team registry at",
        ),
        (["tls", "--dir", "{tmp}/tls", "--host", "not a host!"], ExitCode.FAILED, "neither a DNS name"),
        (["journal", "replay", "-"], ExitCode.FAILED, "not an exported game"),
    ],
)
def test_domain_failures_exit_by_their_class(tmp_path: Path, args: list[str], code: int, says: str) -> None:
    result = CliRunner().invoke(main, [a.replace("{tmp}", str(tmp_path)) for a in args], input="")
    assert result.exit_code == code, result.output
    assert says in result.output


class _Recording(Driver):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[Event] = []

    def send(self, event: Event) -> Result:
        self.events.append(event)
        return super().send(event)


@pytest.mark.parametrize("v1", [False, True])
def test_an_exported_game_replays_as_a_resuming_referee_reads_it(tmp_path: Path, v1: bool) -> None:
    """A v1 journal's shots name no shooter: the replay takes them as the
    current player's, as the referee does when it resumes."""
    d = _Recording()
    d.start({"alice": ROWS, "bob": COLUMNS})
    for _ in range(3):
        d.idle_turn()
    g = d.game
    head = {"type": "game", "arena": "", "game": 1, "game_id": g.game_id, "seed": 7}
    lines = [{**head, "config": json.loads(config_to_json(g.config))}]
    for ev in d.events:
        line = event_to_json(ev)
        if v1 and line["type"] == "fire":
            del line["shooter"]
        lines.append(line)
    source = tmp_path / "game.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = CliRunner().invoke(main, ["journal", "replay", str(source)])
    assert result.exit_code == 0, result.output
    assert f"{len(d.events)} events, 0 rejected; state turn, {g.turn} turns, winner - (in progress)" in result.output


@pytest.mark.broker
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


@pytest.mark.broker
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


@pytest.mark.broker
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


@pytest.mark.broker
def test_a_damaged_state_file_is_refused_naming_the_game_the_broker_shows(
    broker: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    t = Topics(prefix)
    shown = Recorder(broker, "referee", [])
    try:
        shown.publish(t.game_id, "g-held", retain=True)
        shown.publish(t.state, "turn", retain=True)
        bad = tmp_path / "state.db"
        bad.write_bytes(b"garbage" * 100)
        args = ["referee", "--prefix", prefix, "--state", str(bad), "--key-file", str(tmp_path / "k")]
        result = CliRunner().invoke(main, [*args, "--broker", broker.url("referee")])
        assert result.exit_code == ExitCode.LOCAL_FILE, result.output
        assert "refusing to start" in result.output and f"arena {prefix}: game g-held (turn)" in result.output
        assert "--fresh" in result.output
        assert bad.read_bytes() == b"garbage" * 100  # untouched
        # --fresh sets it aside (never deletes it) for a new one
        store = open_state(bad, Broker.from_url(broker.url("referee")), [prefix], fresh=True)
        store.close()
        (aside,) = tmp_path.glob("state.db.damaged-*")
        assert aside.read_bytes() == b"garbage" * 100
    finally:
        shown.publish(t.state, "", retain=True)
        shown.publish(t.game_id, "", retain=True)
        shown.close()


@pytest.mark.parametrize("command", ["referee", "tournament"])
def test_a_reset_after_of_zero_is_refused_before_anything_starts(command: str) -> None:
    """The game's Config refuses it (a game over would never reset): the
    tournament used to accept it and fail later, at its first game."""
    args = [command] if command == "referee" else ["tournament", "run"]
    out = CliRunner().invoke(main, [*args, "--reset-after", "0", "--broker", "mqtt://127.0.0.1:1"])
    assert out.exit_code == 2 and "--reset-after" in out.output, out.output


@pytest.mark.parametrize("command", ["referee", "tournament"])
@pytest.mark.parametrize(
    "option",
    [
        ["--placement-timeout", "0"],
        ["--turn-timeout", "-1"],
        ["--reset-after", "-5"],
        ["--pace", "-1"],
        ["--pace", "3601"],
    ],
)
def test_both_commands_refuse_what_the_games_config_refuses(command: str, option: list[str]) -> None:
    args = [command] if command == "referee" else ["tournament", "run"]
    field = option[0].removeprefix("--").replace("-", "_").replace("pace", "pace_s")
    with pytest.raises(ValueError, match="must be"):  # the game's own word on it
        Config(**{field: float(option[1])})  # type: ignore[arg-type]
    out = CliRunner().invoke(main, [*args, *option, "--broker", "mqtt://127.0.0.1:1"])
    assert out.exit_code == 2 and option[0] in out.output, out.output


def test_the_referee_refuses_fewer_max_than_min_players_as_its_config_does() -> None:
    out = CliRunner().invoke(main, ["referee", "--min-players", "5", "--max-players", "3", "--broker", "x"])
    assert out.exit_code == 2 and "min_players" in out.output, out.output


def test_the_options_show_the_games_defaults_and_config_takes_names_only() -> None:
    """One place for the defaults (salvo.game.defaults): Config's fields and
    the options' --help show the same; nothing maps settings by position."""
    config = Config()

    def default(option: str, text: str) -> str | None:  # within the option's own entry
        found = re.search(rf"\n  {option} (?:(?!\n  -).)*?\[default: ([^;\]]+)", text, re.DOTALL)
        return found[1] if found else None

    referee = CliRunner().invoke(main, ["referee", "--help"], terminal_width=200).output
    shown = {
        "--placement-timeout": config.placement_timeout,
        "--turn-timeout": config.turn_timeout,
        "--reset-after": config.reset_after,
        "--min-players": config.min_players,
        "--max-players": config.max_players,
        "--max-missed-turns": config.max_missed_turns,
        "--pace": config.pace_s,
    }
    for option, value in shown.items():
        assert default(option, referee) == str(value), option
    tournament = CliRunner().invoke(main, ["tournament", "run", "--help"], terminal_width=200).output
    for option in ("--placement-timeout", "--turn-timeout", "--pace"):
        assert default(option, tournament) == str(shown[option]), option
    assert default("--reset-after", tournament) == str(defaults.TOURNAMENT_RESET_AFTER_S)
    with pytest.raises(TypeError):
        Config(60.0)  # type: ignore[call-arg]
