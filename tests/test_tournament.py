"""Tournament night: scheduling and standings (pure), and a whole simulated
evening — 8 bot teams, 2 arenas, round robin — from one command."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from salvo.bots import make_strategy
from salvo.client import GameRecord
from salvo.conformance.harness import Recorder
from salvo.mqtt import Broker
from salvo.teams import add_team
from salvo.tournament import GameResult, follow, round_robin, standings, swiss_round

from mosquitto import Mosquitto


@pytest.mark.parametrize("n", [2, 3, 7, 8])
def test_round_robin_meets_every_pair_once(n: int) -> None:
    teams = [f"t{i}" for i in range(n)]
    rounds = round_robin(teams)
    games = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, games)) == sorted(map(sorted, map(frozenset, itertools.combinations(teams, 2))))
    for r in rounds:  # nobody twice in a round
        seen = [t for p in r for t in p]
        assert len(seen) == len(set(seen))


def test_standings_points_then_hits() -> None:
    def game(a: str, b: str, winner: str | None, hits: tuple[int, int]) -> GameResult:
        return GameResult(
            1, "x", [a, b], winner, {a: {"shots": 20, "hits": hits[0]}, b: {"shots": 20, "hits": hits[1]}}
        )

    rows = standings(
        ["a", "b", "c"], [game("a", "b", "a", (17, 5)), game("b", "c", None, (9, 9)), game("a", "c", "c", (3, 17))]
    )
    assert [(r.team, r.points, r.hits) for r in rows] == [("c", 3, 26), ("a", 2, 20), ("b", 1, 14)]
    assert rows[0].accuracy == round(26 / 40, 3)


def test_swiss_avoids_rematches() -> None:
    teams = ["a", "b", "c", "d"]
    first = swiss_round(teams, [])
    results = [GameResult(1, "x", list(p), p[0], {}) for p in first]
    second = swiss_round(teams, results)
    assert not {frozenset(p) for p in first} & {frozenset(p) for p in second}


@pytest.mark.mqtt
def test_a_simulated_evening(tmp_path: Path) -> None:
    names = [f"team{i}" for i in range(1, 9)]
    mosq = Mosquitto(tmp_path / "broker", users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    try:
        referee = Broker.from_url(mosq.url("referee"))
        records: dict[str, list[GameRecord]] = {n: [] for n in names}
        errors: dict[str, str] = {}

        def team(name: str, i: int) -> None:
            card = cards[name]
            broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
            try:
                follow(
                    broker,
                    name,
                    card.secret,
                    lambda: make_strategy(["density", "hunt-target", "random"][i % 3], f"{name}"),
                    on_game=records[name].append,
                )
            except Exception as exc:  # reported below, not lost with the thread
                errors[name] = repr(exc)

        bots = [threading.Thread(target=team, args=(n, i), daemon=True) for i, n in enumerate(names)]
        for b in bots:
            b.start()
        # The one command of the evening.
        director = subprocess.run(  # noqa: PLW1510 - the exit code is asserted below
            [
                sys.executable,
                "-m",
                "salvo",
                "tournament",
                "--broker",
                referee.url,
                "--password",
                "referee-pw",
                "--username",
                "referee",
                "--teams",
                str(registry),
                "--arenas",
                "2",
                "--state",
                str(tmp_path / "tournament.json"),
                "--referee-state",
                str(tmp_path / "referee.db"),
                "--key-file",
                str(tmp_path / "referee.key"),
                "--turn-timeout",
                "5",
                "--placement-timeout",
                "20",
                "--reset-after",
                "0.5",
                "--log-level",
                "warning",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert director.returncode == 0, director.stderr[-3000:]
        for b in bots:
            b.join(60)
        assert errors == {}

        # 28 games, each team 7; the standings agree with what every team saw.
        state: dict[str, Any] = json.loads((tmp_path / "tournament.json").read_text())
        assert len(state["results"]) == 28
        watch = Recorder(Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}"), ["/tournament/standings"])
        table = json.loads(watch.wait_for("/tournament/standings").payload)["table"]
        watch.close()
        assert table and all(row["played"] == 7 for row in table)
        for row in table:
            mine = records[row["team"]]
            assert len(mine) == 7
            assert row["wins"] == sum(1 for r in mine if r.winner == row["team"])
            assert row["hits"] == sum(r.mine.hits for r in mine if r.mine)
        assert sum(row["points"] for row in table) == 2 * 28
        ranking = director.stdout.splitlines()
        assert ranking[1].split()[1] == table[0]["team"]  # printed = retained
    finally:
        mosq.stop()
