"""`salvo bench --quick` runs end to end and writes the figures. No timing is
asserted here: the targets live in the bench's own table, not in the suite."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from salvo.cli import main
from salvo.tools import perf
from salvo.tools.perf import broker_bench
from salvo.tools.stress import RefereeProcess

REQUIRED = [
    "engine.ms_per_game",
    "engine.ms_per_game_4p",
    "engine.knockout_1024_s",
    "engine.knockout_1024_1core_s",
    "e2e.shot_rtt_p50_ms",
    "e2e.shot_rtt_p99_ms",
    "e2e.echo_rtt_p50_ms",
    "e2e.rtt_ratio_p50",
    "e2e.shots_per_s",
    "e2e.echo_msgs_per_s",
    "e2e.throughput_ratio",
    "join.burst_s",
    "join.ideal_s",
    "join.burst_ratio",
    "join.other_p99_ms",
    "memory.idle_rss_mb",
    "memory.arenas10_rss_mb",
    "memory.burst_peak_rss_mb",
]


@pytest.mark.broker
def test_quick_bench_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench-results.json"
    result = CliRunner().invoke(main, ["bench", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    for key in REQUIRED:
        value = figures[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, value)
    assert set(figures["targets_met"]) == set(perf.TARGETS)
    assert figures["meta"]["quick"] is True and "engine.ms_per_game" in result.output


def test_the_engine_games_are_whole_games() -> None:
    """The engine bench plays real games to the end: a knockout of 8 needs
    7 games and crowns one of its teams, however it is shared out."""
    champion, played = perf.knockout(8, seed=3)
    assert played == 7 and champion.startswith("team")
    assert perf.knockout(8, seed=3, workers=2) == (champion, 7)  # shared out to processes: the same knockout
    assert perf.engine_game(random.Random(1), ["a", "b", "c", "d"]) in {"a", "b", "c", "d"}


def test_the_event_clock_sorts_every_event_of_a_game() -> None:
    """The per-event figures (engine.shot_us, engine.salvo_end_us, ...) cover
    every event once, sorted right, and timing a game does not change it."""
    clock = perf.EventClock()
    timed = perf.engine_game(random.Random(5), ["a", "b"], clock)
    assert timed == perf.engine_game(random.Random(5), ["a", "b"])
    game = clock.last
    assert game is not None and game.winner == timed
    assert clock.counts["lobby"] == 2 + 2 * 5  # two joins, five ships each
    # Random shooters fire every shot they have, so each turn ends with a shot.
    assert clock.counts["salvo_end"] == game.turn
    assert clock.counts["shot"] + clock.counts["salvo_end"] == sum(p.shots for p in game.players.values())
    assert all(clock.seconds[k] > 0 for k in clock.KINDS)


def test_bench_refuses_unknown_parts() -> None:
    result = CliRunner().invoke(main, ["bench", "--only", "engine,gpu"])
    assert result.exit_code == 2 and "gpu" in result.output


@pytest.mark.parametrize(("limit", "code"), [(1e9, 0), (0.0, 1)])
def test_check_turns_a_missed_target_into_exit_code_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: float, code: int
) -> None:
    monkeypatch.setattr(perf, "TARGETS", {"engine.ms_per_game": (limit, "<=")})
    args = ["bench", "--quick", "--only", "engine", "--check", "--out", str(tmp_path / "b.json")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
    assert json.loads((tmp_path / "b.json").read_text())["targets_met"] == {"engine.ms_per_game": code == 0}


def test_the_echo_peer_runs_from_the_broker_helpers() -> None:
    """The bench starts its echo peer as ``python -m salvo.tools.localbroker echo``."""
    argv = [sys.executable, "-m", "salvo.tools.localbroker"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "usage: python -m salvo.tools.localbroker echo URL IN OUT" in done.stderr


SCALE_REQUIRED = [
    "scale.up_s",
    "scale.rss_per_arena_kb",
    "scale.busy_shot_rtt_p99_ms",
    "scale.echo_rtt_p99_ms",
    "scale.busy_rtt_ratio_p99",
    "scale.full_game_s",
    "scale.sigterm_s",
    "scale.shots_per_s_1proc",
    "scale.shots_per_s_2proc",
    "scale.team_subscribe_ms",
]


@pytest.mark.broker
def test_quick_scale_bench_brings_every_arena_up_and_down(tmp_path: Path) -> None:
    """Not a timing: every arena came up, a game played in the last one,
    SIGTERM left none of them 'up', and each figure was measured."""
    out = tmp_path / "bench-scale.json"
    result = CliRunner().invoke(main, ["bench", "scale", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    for key in SCALE_REQUIRED:
        value = figures[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, value)
    assert figures["scale.arenas_up"] == 20 and figures["scale.arenas_not_down"] == 0
    assert figures["scale.busy_arena_played"] == 1, figures["meta"].get("busy_arena_failed")
    assert "scale.arenas_up" not in figures["targets_met"]  # 1000 is judged on the full run only


@pytest.mark.broker
def test_the_e2e_referee_runs_at_the_log_level_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--referee-log-level info measures the referee as `salvo referee` runs
    by default (a line per accepted message), against the bench's warning."""
    started: list[list[str]] = []
    real = RefereeProcess

    def spied(*args: Any, **kwargs: Any) -> RefereeProcess:
        process = real(*args, **kwargs)
        started.append(process.args)
        return process

    monkeypatch.setattr(broker_bench, "RefereeProcess", spied)
    out = tmp_path / "b.json"
    args = ["bench", "--quick", "--only", "e2e", "--referee-log-level", "info", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["meta"]["referee_log_level"] == "info" and figures["e2e.rtt_ratio_p50"] > 0
    assert len(started) == 2  # the round trips' referee, the throughput's
    for argv in started:
        levels = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--log-level"]
        assert levels[-1] == "info"  # (click takes the last of a repeated option)
