"""The examples are real programs: they play protocol v2 games against the
referee, over plain MQTT and over TLS, and show a refused join's code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

from salvo.organiser import tls

from conftest import TeamFactory
from mosquitto import Mosquitto

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_raw_client_imports_nothing_but_paho_and_pynacl() -> None:
    tree = ast.parse((EXAMPLES / "raw_client.py").read_text())
    modules = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    modules |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert modules <= {"argparse", "base64", "json", "random", "threading", "paho", "nacl"}


def test_minimal_bot_is_about_twenty_lines() -> None:
    source = (EXAMPLES / "minimal_bot.py").read_text()
    docstring_end = ast.parse(source).body[0].end_lineno
    assert docstring_end is not None
    code = [line for line in source.splitlines()[docstring_end:] if line.strip()]
    assert len(code) <= 22


def raw_client(host: str, port: int, prefix: str, name: str, secret: str, *extra: str) -> subprocess.Popen[str]:
    args = ["--name", name, "--secret", secret, "--host", host, "--port", str(port), "--prefix", prefix, *extra]
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / "raw_client.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def minimal_bot(name: str, secret: str, url: str, prefix: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / "minimal_bot.py"), name, secret, url, prefix, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def play_out(raw: subprocess.Popen[str], bot: subprocess.Popen[str]) -> None:
    """Both programs play to the end; the raw client's every shot was taken."""
    try:
        raw_out, _ = raw.communicate(timeout=120)
        bot_out, _ = bot.communicate(timeout=30)
    finally:
        raw.kill()
        bot.kill()
    assert raw.returncode == 0, raw_out
    assert bot.returncode == 0, bot_out
    lines = raw_out.strip().splitlines()
    winner = lines[-1].removeprefix("winner: ")
    assert winner in ("alice", "bob")
    assert f"winner {winner}" in bot_out
    # No rejection reached alice's error topic, and she did fire (bound shots were accepted).
    assert "referee says" not in raw_out, raw_out
    mine = lines[-2]
    assert mine.startswith("me: ") and not mine.startswith("me: 0 shots"), raw_out


def test_raw_client_plays_a_game_against_the_minimal_bot(broker: Mosquitto, start_referee: Any, prefix: str) -> None:
    start_referee(turn_timeout=10)
    password = broker.users["alice"]
    raw = raw_client("127.0.0.1", broker.port, prefix, "alice", "a-secret", "--password", password, "--seed", "1")
    bot = minimal_bot("bob", "b-secret", broker.url("bob"), prefix)
    play_out(raw, bot)


def test_raw_client_reads_its_refusal_on_game_errors(
    broker: Mosquitto, start_referee: Any, prefix: str, make_team: TeamFactory
) -> None:
    start_referee()
    alice = make_team("alice")
    alice.join()
    alice.conn.wait(lambda m: m.topic == alice.t.approved("alice", "carrier"))  # joined
    raw = raw_client("127.0.0.1", broker.port, prefix, "alice", "another-secret", "--password", broker.users["alice"])
    out, _ = raw.communicate(timeout=60)
    assert raw.returncode == 1, out
    assert "join refused: name_taken: name taken: 'alice' already joined with another secret" in out, out


# -- TLS: the test broker runs the shipped mosquitto.conf, TLS listener included ------------


def test_both_examples_play_over_tls_verifying_the_organisers_ca(
    broker: Mosquitto, start_referee: Any, prefix: str
) -> None:
    # As at the venue: the referee on the plain loopback listener, the teams over TLS.
    start_referee(turn_timeout=10)
    ca = str(broker.ca_file)
    password = broker.users["alice"]
    raw = raw_client("127.0.0.1", broker.tls_port, prefix, "alice", "a-secret", "--password", password, "--ca-file", ca)
    bot = minimal_bot("bob", "b-secret", broker.tls_url("bob"), prefix, ca)
    play_out(raw, bot)


def test_raw_client_refuses_a_broker_its_ca_did_not_sign(broker: Mosquitto, prefix: str, tmp_path: Path) -> None:
    other_ca = str(tls.issue(tmp_path / "another-venue").ca_cert)
    password = broker.users["alice"]
    raw = raw_client(
        "127.0.0.1", broker.tls_port, prefix, "alice", "a-secret", "--password", password, "--ca-file", other_ca
    )
    out, _ = raw.communicate(timeout=30)
    assert raw.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in out, out
