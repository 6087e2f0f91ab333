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

from salvo.bots import make_strategy
from salvo.mqtt import Broker
from salvo.teams import add_team
from salvo.tournament import follow
from salvo.watch import Recorder, wait_until
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
    director = subprocess.Popen(
        director_cmd(mosq.url("referee"), tmp_path, registry, "--no-show-after", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Paused before any bot is up: nothing new is assigned until resume.
        wait_until(state.exists, 30, "the state file")
        assert salvo("tournament", "pause", *ctl).returncode == 0
        refused = salvo("tournament", "pause", *ctl)
        assert refused.returncode == 1 and "already-paused" in refused.stderr
        status = json.loads(salvo("tournament", "status", "--json", *ctl).stdout)
        assert status["tournament"]["paused"] and status["tournament"]["running"]

        # dan never comes: withdrawn, its three games forfeited at once.
        out = salvo("tournament", "withdraw", "dan", "--reason", "bus broke down", *ctl)
        assert out.returncode == 0, out.stderr
        assert "forfeited" in out.stdout
        told = watch.wait(lambda m: m.topic.endswith("/dan") and b"done" in m.payload, what="dan told")
        assert json.loads(told.payload) == {"done": True, "withdrawn": True}

        bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in names[:3]]
        for b in bots:
            b.start()
        assert salvo("tournament", "resume", *ctl).returncode == 0

        # A team registered during the night waits for the organisers, then plays.
        cards["eve"] = add_team(registry, mosq.passwd, "eve")
        mosq.reload()
        waiting = watch.wait(
            lambda m: m.topic.endswith("/eve") and b"waiting" in m.payload, timeout=30, what="eve told to wait"
        )
        assert "organisers decide" in json.loads(waiting.payload)["waiting"]
        out = salvo("tournament", "admit-late", "eve", *ctl)
        assert out.returncode == 0, out.stderr
        late = threading.Thread(target=team, args=("eve",), daemon=True)
        late.start()
        rows, err = director.communicate(timeout=240)
        assert director.returncode == 0, err[-3000:]
        for b in [*bots, late]:
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
    assert [a["action"] for a in exported["audit"]] == ["pause", "withdraw", "resume", "admit-late"]
    assert exported["audit"][1]["args"]["reason"] == "bus broke down"
    table = list(
        csv.DictReader(io.StringIO(salvo("tournament", "export", "--format", "csv", "--what", "teams", *ctl).stdout))
    )
    assert {r["team"] for r in table} == {"ann", "bob", "cat", "dan", "eve"}
    assert "withdrawn" in rows
