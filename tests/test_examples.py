"""The examples are real programs: they play a game against the referee."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mosquitto import Mosquitto

pytestmark = pytest.mark.mqtt
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_raw_client_imports_nothing_but_paho_and_pynacl() -> None:
    tree = ast.parse((EXAMPLES / "raw_client.py").read_text())
    modules = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    modules |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert modules <= {"argparse", "base64", "json", "random", "threading", "paho", "nacl"}


def test_minimal_bot_is_about_twenty_lines() -> None:
    code = [line for line in (EXAMPLES / "minimal_bot.py").read_text().splitlines() if line.strip()]
    assert len(code) <= 22


def test_raw_client_plays_a_game_against_the_minimal_bot(broker: Mosquitto, start_referee: Any, prefix: str) -> None:
    start_referee(turn_timeout=10)
    raw = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "raw_client.py"),
            "--name",
            "alice",
            "--secret",
            "a-secret",
            "--password",
            broker.users["alice"],
            "--host",
            "127.0.0.1",
            "--port",
            str(broker.port),
            "--prefix",
            prefix,
            "--seed",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    bot = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "minimal_bot.py"), "bob", "b-secret", broker.url("bob"), prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        raw_out, _ = raw.communicate(timeout=120)
        bot_out, _ = bot.communicate(timeout=30)
    finally:
        raw.kill()
        bot.kill()
    assert raw.returncode == 0, raw_out
    assert bot.returncode == 0, bot_out
    winner = raw_out.strip().splitlines()[-1].removeprefix("winner: ")
    assert winner in ("alice", "bob")
    assert f"winner {winner}" in bot_out
