"""The organiser's controls from the command line, against a running
director on the project's broker: a team withdrawn, the tournament paused
and resumed, a team registered late and admitted, the status and exports."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from salvo.net.mqtt import Broker
from salvo.net.watch import Recorder, wait_until
from salvo.organiser.teams import add_team
from salvo.sdk.bots import make_strategy
from salvo.sdk.follow import follow
from test_tournament_restart import director_cmd

from conftest import BrokerFactory


def salvo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "salvo", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_withdraw_pause_and_a_late_team(new_broker: BrokerFactory, tmp_path: Path) -> None:
    names = ["ann", "bob", "cat", "dan"]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    state = tmp_path / "tournament.json"
    ctl = ("--state", str(state))
    played: dict[str, int] = {}
    errors: dict[str, str] = {}

    def team(name: str) -> None:
        card = cards[name]
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
        try:
            played[name] = follow(broker, name, card.secret, lambda: make_strategy("random", name))
        except Exception as exc:
            errors[name] = repr(exc)

    watch = Recorder(Broker.from_url(mosq.url("referee")), ["/tournament/standings", "/tournament/assignments/+"])
    log = tmp_path / "director.log"  # a file: a pipe nobody reads fills up and stalls the director
    director = subprocess.Popen(
        director_cmd(mosq.url("referee"), tmp_path, registry, "--no-show-after", "0"),
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    try:
        # Paused before any bot is up: nothing new is assigned until resume.
        wait_until(state.exists, 30, "the state file")
        assert salvo("tournament", "pause", *ctl).returncode == 0
        refused = salvo("tournament", "pause", *ctl)
        assert refused.returncode == 1 and "already_paused" in refused.stderr
        status = json.loads(salvo("tournament", "status", "--json", *ctl).stdout)
        assert status["tournament"]["paused"] and status["tournament"]["running"]

        # dan never comes: withdrawn, its three games forfeited at once.
        out = salvo("tournament", "withdraw", "dan", "--reason", "bus broke down", *ctl)
        assert out.returncode == 0, out.stderr
        assert "forfeited" in out.stdout
        told = watch.wait(lambda m: m.topic.endswith("/dan") and b"done" in m.payload, what="dan told")
        assert json.loads(told.payload) == {"done": True, "withdrawn": True}

        # A team registered during the night waits for the organisers, then
        # plays. (Still paused: running, three random bots finish the night
        # in a couple of seconds, sooner than a registration is noticed.)
        cards["eve"] = add_team(registry, mosq.passwd, "eve")
        mosq.reload()
        waiting = watch.wait(
            lambda m: m.topic.endswith("/eve") and b"waiting" in m.payload, timeout=30, what="eve told to wait"
        )
        assert "organisers decide" in json.loads(waiting.payload)["waiting"]
        out = salvo("tournament", "admit-late", "eve", "--wait", "60", *ctl)  # a loaded CI machine is slow
        assert out.returncode == 0, out.stderr

        bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in [*names[:3], "eve"]]
        for b in bots:
            b.start()
        assert salvo("tournament", "resume", *ctl).returncode == 0
        rows = director.communicate(timeout=240)[0]
        assert director.returncode == 0, log.read_text()[-3000:]
        for b in bots:
            b.join(60)
        assert errors == {}
        assert played == {"ann": 3, "bob": 3, "cat": 3, "eve": 3}  # each other once; dan's games forfeited
    finally:
        if director.poll() is None:
            director.kill()
        watch.close()
        mosq.stop()

    exported: dict[str, Any] = json.loads(salvo("tournament", "export", *ctl).stdout)
    games = exported["games"]
    assert [g["status"] for g in games].count("forfeit") == 3
    assert all(g["forfeited"] == ["dan"] for g in games if g["status"] == "forfeit")
    real = [g for g in games if g["status"] == "played"]
    assert len(real) == 6 and all(g["turns"] and g["duration_s"] is not None and g["journal_game"] for g in real)
    teams = {t["team"]: t for t in exported["teams"]}
    assert teams["dan"]["withdrawn"] and teams["dan"]["forfeits"] == 3 and teams["dan"]["points"] == 0
    assert [a["action"] for a in exported["audit"]] == ["pause", "withdraw", "admit-late", "resume"]
    assert exported["audit"][1]["args"]["reason"] == "bus broke down"
    table = list(
        csv.DictReader(io.StringIO(salvo("tournament", "export", "--format", "csv", "--what", "teams", *ctl).stdout))
    )
    assert {r["team"] for r in table} == {"ann", "bob", "cat", "dan", "eve"}
    assert "withdrawn" in rows


def test_tables_of_three_play_and_score_by_place(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """Seven teams at tables of 3 (a table of 3 and two of 2 each round: the
    referee is set to each table's size), two rounds on two arenas."""
    names = [f"t{i}" for i in range(1, 8)]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    games: dict[str, list[Any]] = {n: [] for n in names}
    errors: dict[str, str] = {}

    def team(name: str) -> None:
        card = cards[name]
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
        try:
            follow(broker, name, card.secret, lambda: make_strategy("random", name), on_game=games[name].append)
        except Exception as exc:
            errors[name] = repr(exc)

    bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in names]
    for b in bots:
        b.start()
    cmd = director_cmd(mosq.url("referee"), tmp_path, registry, "--table-size", "3", "--rounds", "2")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        for b in bots:
            b.join(60)
        assert errors == {}
        state = json.loads((tmp_path / "tournament.json").read_text())
        results = state["results"]
        assert sorted(len(r["players"]) for r in results) == [2, 2, 2, 2, 3, 3]
        assert all(r["status"] == "played" and not r["forfeited"] for r in results)
        for r in results:  # every seat played the game the director recorded, in the same place
            assert sorted(r["stats"]) == sorted(r["players"])
            for p in r["players"]:
                mine = [g for g in games[p] if g.mine and g.winner == r["winner"]]
                assert mine, (p, r)
        three = [r for r in results if len(r["players"]) == 3]
        exported = json.loads(salvo("tournament", "export", "--state", str(tmp_path / "tournament.json")).stdout)
        points = {t["team"]: t["points"] for t in exported["teams"]}
        # a table of 3 hands out 4 + 2 + 0 (ties shared), a duel 2 + 0: 2*6 + 4*2
        assert sum(points.values()) == 6 * len(three) + 2 * (len(results) - len(three))
    finally:
        mosq.stop()


def test_extra_time_abort_and_a_correction_after_the_night(new_broker: BrokerFactory, tmp_path: Path) -> None:
    from test_console_live import Held

    names = ["ann", "bob"]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    state = tmp_path / "tournament.json"
    ctl = ("--state", str(state))
    go = threading.Event()
    played: dict[str, int] = {}

    def team(name: str) -> None:
        card = cards[name]
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
        played[name] = follow(broker, name, card.secret, lambda: Held(make_strategy("random", name), go))

    watch = Recorder(Broker.from_url(mosq.url(None)), ["/arena1/game/deadline", "/arena1/game/state"])
    bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in names]
    for b in bots:
        b.start()
    cmd = director_cmd(mosq.url("referee"), tmp_path, registry, "--turn-timeout", "60")
    log = tmp_path / "director.log"  # a file: a pipe nobody reads fills up and stalls the director
    director = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    try:
        watch.wait_for("/arena1/game/state", "turn", timeout=60)
        before = json.loads(watch.wait(lambda m: b'"turn"' in m.payload, what="a turn deadline").payload)
        out = salvo("tournament", "extra-time", "arena1", "30", *ctl)
        assert out.returncode == 0, out.stderr
        later = watch.wait(
            lambda m: m.topic.endswith("deadline") and bool(m.payload) and json.loads(m.payload)["at"] > before["at"]
        )
        assert json.loads(later.payload)["at"] - before["at"] >= 29

        # Aborted: no result, both teams let go, the same pair called again and played.
        mark = watch.mark()
        out = salvo("tournament", "abort-game", "arena1", "--reason", "a cable came out", *ctl)
        assert out.returncode == 0, out.stderr
        watch.wait_for("/arena1/game/state", "lobby", after=mark, timeout=30)
        go.set()  # the held turn's shots go nowhere; the replay plays at full speed
        director.communicate(timeout=120)
        assert director.returncode == 0, log.read_text()[-3000:]
        for b in bots:
            b.join(30)
        assert played == {"ann": 2, "bob": 2}  # two assignments each: the aborted game, then its replay
    finally:
        go.set()
        if director.poll() is None:
            director.kill()
        watch.close()

    saved = json.loads(state.read_text())
    assert [r["status"] for r in saved["results"]] == ["aborted", "played"]
    assert saved["results"][0]["note"] == "a cable came out"
    winner = saved["results"][1]["winner"]
    loser = next(n for n in names if n != winner)

    # After the night: a correction is queued and applied by the director's next run.
    queued = salvo("tournament", "override", "1", loser, "--reason", "protest upheld", "--wait", "0.5", *ctl)
    assert queued.returncode == 1 and "queued" in queued.stderr
    refused = salvo("tournament", "void-game", "1", "--wait", "0.5", *ctl)
    assert refused.returncode == 1
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)  # (the broker still runs)
    assert again.returncode == 0, again.stderr[-3000:]
    exported = json.loads(salvo("tournament", "export", *ctl).stdout)
    result = exported["games"][1]
    assert (result["status"], result["winner"], result["note"]) == ("overridden", loser, "protest upheld")
    assert exported["teams"][0]["team"] == loser
    assert [a["action"] for a in exported["audit"]] == ["extra-time", "abort-game", "override"]
    replies = (tmp_path / "tournament.json.replies").read_text()
    assert "tournament_over" in replies  # the void after the night was refused: it could not be replayed
