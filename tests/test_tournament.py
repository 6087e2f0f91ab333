"""Tournament night: scheduling and standings (pure), and a whole simulated
evening — 8 bot teams, 2 arenas, round robin — from one command."""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from salvo.net.mqtt import Broker
from salvo.net.watch import Recorder
from salvo.organiser.teams import add_team
from salvo.organiser.tournament import GameResult, round_robin, standings
from salvo.sdk.bots import make_strategy
from salvo.sdk.follow import follow
from salvo.sdk.outcomes import GameRecord
from salvo.spec.errors import Code, Illegal
from test_tournament_restart import director_cmd

from conftest import BrokerFactory
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


def test_a_simulated_evening(new_broker: BrokerFactory, tmp_path: Path) -> None:
    names = [f"team{i}" for i in range(1, 9)]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    try:
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
            _director_cmd(mosq, tmp_path, registry, "--placement-timeout", "20"),
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


def test_a_tournament_roster_survives_the_registry(tmp_path: Path) -> None:
    """The referee's registry check must not replace an arena's own admission
    rule (the tournament's roster, which consults the registry itself)."""
    from nacl.public import PrivateKey

    from salvo.arena.resume import make_arenas
    from salvo.game.events import Config
    from salvo.referee.admission import Registry
    from salvo.referee.service import Referee

    registry_path = tmp_path / "teams.json"
    card = add_team(registry_path, tmp_path / "passwd", "ada")
    registry = Registry(registry_path)
    arenas = make_arenas(["a1", "a2"], Config(), 1, PrivateKey.generate())

    def roster(name: str, secret: str) -> bool | None:
        verified = registry.admit(name, secret)
        if name != "bob":
            raise Illegal(Code.NOT_REGISTERED, f"{name} is not scheduled here")
        return verified

    arenas[0].admit = roster
    Referee(arenas, Broker.from_url("mqtt://127.0.0.1:1"), registry=registry).pool.shutdown()  # never started
    assert arenas[0].admit is roster
    with pytest.raises(Illegal, match="ada is not scheduled here"):
        arenas[0].admit("ada", card.secret)
    assert arenas[1].admit is not None and arenas[1].admit("ada", card.secret) is True
    with pytest.raises(Illegal, match="not a registered team"):
        arenas[1].admit("eve", "whatever")


def _director_cmd(mosq: Mosquitto, tmp_path: Path, registry: Path, *extra: str) -> list[str]:
    """The evening's command (test_tournament_restart.director_cmd), quieter; ``extra`` wins."""
    return director_cmd(mosq.url("referee"), tmp_path, registry, "--log-level", "warning", *extra)


@pytest.mark.long  # about 25 s: in `pytest -m long` (CI runs it) to keep the default run under 10 minutes
def test_a_no_show_and_a_director_killed_mid_game(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """team4 never comes: its three games are forfeited to the opponents that
    turned up. The director is killed with SIGKILL while a game runs and
    started again: the game carries on in its arena, nothing is played twice."""
    names = ["team1", "team2", "team3", "team4"]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    try:
        records: dict[str, list[GameRecord]] = {n: [] for n in names[:3]}
        errors: dict[str, str] = {}

        def team(name: str) -> None:
            card = cards[name]
            broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
            try:
                follow(broker, name, card.secret, lambda: make_strategy("random", name), on_game=records[name].append)
            except Exception as exc:
                errors[name] = repr(exc)

        bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in names[:3]]
        for b in bots:
            b.start()
        cmd = _director_cmd(
            mosq, tmp_path, registry, "--placement-timeout", "2", "--no-show-after", "9", "--log-level", "info"
        )
        watch = Recorder(Broker.from_url(mosq.url("referee")), ["/tournament/standings", "/+/game/state"])
        # Logs to a file: a pipe nobody reads fills up and stalls the director.
        first_log = (tmp_path / "first.log").open("w")
        first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=first_log)
        try:
            # Kill it while a game is on, after at least one result is in.
            mark = watch.wait(
                lambda m: m.topic == "/tournament/standings" and json.loads(m.payload)["games_played"] >= 1,
                timeout=120,
            )
            watch.wait(
                lambda m: m.topic.endswith("/game/state") and m.payload == b"turn",
                after=watch.messages.index(mark),
                timeout=60,
            )
        finally:
            first.kill()
            first.wait()
            first_log.close()
        before = json.loads((tmp_path / "tournament.json").read_text())["results"]
        log = tmp_path / "second.log"
        with log.open("w") as err:
            second = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                out = second.communicate(timeout=180)[0]
            except subprocess.TimeoutExpired:
                second.kill()
                second.wait()
                raise AssertionError(f"the restarted director never finished:\n{log.read_text()[-5000:]}") from None
        assert second.returncode == 0, log.read_text()[-3000:]
        assert "carries on in arena" in log.read_text()  # the game cut short went on where it was
        for b in bots:
            b.join(60)
        watch.close()
        assert errors == {}, log.read_text()[-4000:]

        results = json.loads((tmp_path / "tournament.json").read_text())["results"]
        assert results[: len(before)] == before and len(before) < 6
        assert sorted(tuple(sorted(r["players"])) for r in results) == sorted(itertools.combinations(names, 2))
        for r in results:
            if "team4" in r["players"]:
                assert r["forfeited"] == ["team4"] and r["winner"] != "team4" and r["winner"] is not None
            else:
                assert r["forfeited"] == [] and r["stats"]
        table = {row.split()[1]: row.split() for row in out.splitlines()[1:-1]}
        assert table["team4"][2:8] == ["3", "0", "0", "3", "3", "0"]  # played, W, D, L, forfeits, points
        for name in names[:3]:  # two real games each, recorded once by the team and the director
            assert len(records[name]) == 2
            won = sum(1 for r in results if r["winner"] == name)
            assert int(table[name][3]) == won
    finally:
        mosq.stop()
