"""`salvo demo` and `salvo bot` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from mosquitto import Mosquitto


def salvo(*args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "salvo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "120", **env},
    )


@pytest.mark.broker  # the demo's own embedded broker (amqtt)
def test_demo_plays_two_games_on_its_embedded_broker() -> None:
    proc = salvo("demo", "--bots", "3", "--games", "2", "--delay", "0", "--turn-timeout", "3", "--seed", "5")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    lines = [line for line in out.splitlines() if line.startswith("game ")]
    assert len(lines) == 2, out
    names = {"ada", "grace", "alan"}
    assert all(line.split("winner ")[1] in names for line in lines)
    assert "density" in out and "hunt-target" in out and "random" in out
    # each game's results table ranks all three players
    for place in (1, 2, 3):
        assert out.count(f"│ {place} │") == 2, out


def test_bots_keep_playing_after_each_reset(broker: Mosquitto, start_referee: Any, prefix: str) -> None:
    """alice is told her arena by --prefix, bob by the environment a compose
    file sets (SALVO_MODE=free-play, SALVO_BOT_ARENA)."""
    start_referee(turn_timeout=10, reset_after=0.5)
    common = ["--games", "2", "--seed", "1"]
    procs = [
        salvo(
            "bot", "--name", "alice", "--secret", "alice-s", "--strategy", "density", "--prefix", prefix, *common,
            SALVO_BROKER=broker.url("alice"),
        ),
        salvo(
            "bot", "--name", "bob", "--secret", "bob-s", "--strategy", "hunt-target", *common,
            SALVO_BROKER=broker.url("bob"), SALVO_MODE="free-play", SALVO_BOT_ARENA=prefix,
        ),
    ]  # fmt: skip
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 0, out
        games = [line for line in out.splitlines() if line.startswith("game ")]
        assert len(games) == 2, out
        assert all("place" in line for line in games)
        assert [line.split(":")[0] for line in games] == ["game 1", "game 2"]  # the bot's own count
