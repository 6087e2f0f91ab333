"""The director stopped the way `docker compose stop/restart` stops it
(SIGTERM) in the middle of a game, and started again: no team is sent home,
every pair plays exactly once, nothing is forfeited, no team is ever in two
arenas at once."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from salvo.net.mqtt import Broker
from salvo.net.watch import Msg, Recorder, wait_until
from salvo.organiser.teams import Card, add_team
from salvo.referee.ownership import TOURNAMENT, Lease
from salvo.sdk.bots import make_strategy
from salvo.sdk.follow import follow
from salvo.sdk.outcomes import GameRecord
from salvo.sdk.strategy import Strategy
from salvo.sdk.view import Shot, View

from conftest import BrokerFactory


def director_cmd(url: str, tmp_path: Path, registry: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "salvo",
        "tournament",
        "run",
        "--console",
        "off",
        "--broker",
        url,
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
        "--placement-timeout",
        "5",
        "--turn-timeout",
        "5",
        "--reset-after",
        "0.5",
        "--no-show-after",
        "60",
        "--log-level",
        "info",
        *extra,
    ]


def overlaps(messages: list[Msg]) -> list[str]:
    """Every moment a team was listed in two arenas' lobbies or games at once."""
    listed: dict[str, set[str]] = {}
    found = []
    for m in messages:
        arena = m.topic.split("/")[1]
        names = set(json.loads(m.payload)) if m.payload else set()
        listed[arena] = names
        for team in names:
            where = [a for a, n in listed.items() if team in n]
            if len(where) > 1:
                found.append(f"{team} in {where}")
    return found


def start_bots(
    port: int,
    cards: dict[str, Card],
    records: dict[str, list[GameRecord]],
    returned: dict[str, int],
    errors: dict[str, str],
) -> list[threading.Thread]:
    """Each team's `salvo bot --tournament` stand-in, on a thread: it follows
    its assignments with a random strategy; what it played goes to
    ``records``, how many games it was told of to ``returned``, a crash to
    ``errors``."""

    def team(name: str) -> None:
        card = cards[name]
        broker = Broker.from_url(f"mqtt://127.0.0.1:{port}").with_credentials(name, card.mqtt_password)
        try:
            returned[name] = follow(
                broker, name, card.secret, lambda: make_strategy("random", name), on_game=records[name].append
            )
        except Exception as exc:
            errors[name] = repr(exc)

    bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in cards]
    for b in bots:
        b.start()
    return bots


def test_round_robin_survives_sigterm_mid_game(new_broker: BrokerFactory, tmp_path: Path) -> None:
    names = ["ann", "bob", "cat", "dan", "eve"]  # odd: a bye each round, rounds overlap
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    try:
        records, returned, errors = {n: list[GameRecord]() for n in names}, dict[str, int](), dict[str, str]()

        watch = Recorder(
            Broker.from_url(mosq.url("referee")),
            ["/tournament/standings", "/tournament/assignments/+", "/+/game/state", "/+/players/list"],
        )
        bots = start_bots(mosq.port, cards, records, returned, errors)
        cmd = director_cmd(mosq.url("referee"), tmp_path, registry)
        first_log = tmp_path / "first.log"  # a file: a pipe nobody reads fills up and stalls the director
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=first_log.open("w"), text=True)
        try:
            mark = watch.wait(
                lambda m: m.topic == "/tournament/standings" and json.loads(m.payload)["games_played"] >= 1,
                timeout=120,
            )
            watch.wait(
                lambda m: m.topic.endswith("/game/state") and m.payload == b"turn",
                after=watch.messages.index(mark),
                timeout=60,
            )
            first.send_signal(signal.SIGTERM)  # what docker compose stop sends
            out = first.communicate(timeout=20)[0]
            err = first_log.read_text()
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 0, err[-3000:]
        assert "paused" in err and out == ""
        before = json.loads((tmp_path / "tournament.json").read_text())
        assert before["live"], "the stop came with no game in progress"
        assert all(b.is_alive() for b in bots), "a team went home on the stop"
        told = [m for m in watch.messages if m.topic.startswith("/tournament/assignments/") and m.payload]
        assert not any(json.loads(m.payload).get("done") for m in told)

        log = tmp_path / "second.log"
        with log.open("w") as second_err:
            second = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=second_err, text=True)
            try:
                out = second.communicate(timeout=240)[0]
            finally:
                if second.poll() is None:
                    second.kill()
        assert second.returncode == 0, log.read_text()[-4000:]
        assert "carries on in arena" in log.read_text() or "ended in" in log.read_text()
        for b in bots:
            b.join(60)
        assert errors == {}, errors
        assert returned == dict.fromkeys(names, 4)  # each came back for every game, then was told done

        state = json.loads((tmp_path / "tournament.json").read_text())
        results = state["results"]
        assert sorted(tuple(sorted(r["players"])) for r in results) == sorted(itertools.combinations(names, 2))
        assert all(r["status"] == "played" and not r["forfeited"] and r["stats"] for r in results)
        assert results[: len(before["results"])] == before["results"]
        assert overlaps([m for m in watch.messages if m.topic.endswith("/players/list")]) == []
        for name in names:
            assert len(records[name]) == 4
        watch.close()
    finally:
        mosq.stop()


def test_overlaps_sees_a_team_listed_in_two_arenas() -> None:
    def listed(arena: str, names: list[str]) -> Msg:
        return Msg(f"/{arena}/players/list", json.dumps(names).encode(), True, 0.0)

    clean = [listed("a1", ["x", "y"]), listed("a1", []), listed("a2", ["x", "z"])]
    assert overlaps(clean) == []
    assert overlaps([listed("a1", ["x", "y"]), listed("a2", ["x"])]) == ["x in ['a1', 'a2']"]


def test_a_new_night_takes_a_finished_game_over_and_a_game_in_progress_only_with_fresh(
    new_broker: BrokerFactory, tmp_path: Path
) -> None:
    """The last game of an earlier night is still up on arena1 (over, not
    reset; its referee down): a new night's director takes it over without a
    flag and clears it. A tournament game still in progress on arena2 is
    another matter: refused, unless told to end it (--fresh)."""
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    for n in ("ann", "bob"):
        add_team(registry, mosq.passwd, n)
    mosq.start()
    topics = ["/arena1/game/server", "/arena1/game/winner", "/arena2/game/id", "/tournament/schedule"]
    old = Recorder(Broker.from_url(mosq.url("referee")), topics)
    last_night = Lease("ffff", 1.0, "there", TOURNAMENT).text()
    for arena, state, game in (("arena1", "over", "g-last-night"), ("arena2", "turn", "g-unfinished")):
        for topic, payload in (("state", state), ("id", game), ("server", "down"), ("lease", last_night)):
            old.publish(f"/{arena}/game/{topic}", payload, retain=True)
        old.publish(f"/{arena}/players/list", '["ann","bob"]', retain=True)
    old.publish("/arena1/game/winner", "ann", retain=True)
    try:
        cmd = director_cmd(mosq.url("referee"), tmp_path, registry)
        refused = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 4, refused.stderr
        assert (
            "arena2: the broker shows a game in progress by a tournament referee (game g-unfinished" in refused.stderr
        )
        assert "arena1" not in refused.stderr  # the finished game is no reason to refuse
        assert "--fresh (SALVO_FRESH=1)" in refused.stderr
        director = subprocess.Popen([*cmd, "--fresh"], stderr=subprocess.DEVNULL, text=True)
        try:
            old.wait(lambda m: m.topic == "/arena1/game/server" and m.payload == b"up", timeout=30, what="arena1 up")
            old.wait(lambda m: m.topic == "/tournament/schedule", timeout=30, what="the director at work")
            old.wait(lambda m: m.topic == "/arena1/game/winner" and not m.payload, timeout=30, what="winner cleared")
            old.wait(lambda m: m.topic == "/arena2/game/id" and m.payload != b"g-unfinished", timeout=30, what="new id")
        finally:
            director.send_signal(signal.SIGTERM)
            assert director.wait(30) == 0
    finally:
        old.close()


def test_last_nights_finished_game_needs_no_flag(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """Only finished games on the arenas, their referees down: the new
    night's director starts at once (before, every second night needed
    --fresh), and the old results are gone from the broker."""
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    for n in ("ann", "bob"):
        add_team(registry, mosq.passwd, n)
    mosq.start()
    topics = ["/arena1/game/winner", "/arena1/game/server", "/tournament/schedule"]
    old = Recorder(Broker.from_url(mosq.url("referee")), topics)
    for topic, payload in (("state", "over"), ("id", "g-last-night"), ("winner", "ann"), ("server", "down")):
        old.publish(f"/arena1/game/{topic}", payload, retain=True)
    try:
        director = subprocess.Popen(director_cmd(mosq.url("referee"), tmp_path, registry), stderr=subprocess.DEVNULL)
        try:
            old.wait(lambda m: m.topic == "/arena1/game/server" and m.payload == b"up", timeout=30, what="arena1 up")
            old.wait(lambda m: m.topic == "/arena1/game/winner" and not m.payload, timeout=30, what="winner cleared")
            old.wait(lambda m: m.topic == "/tournament/schedule", timeout=30, what="the director at work")
        finally:
            director.send_signal(signal.SIGTERM)
            assert director.wait(30) == 0
    finally:
        old.close()


class HeldAfter(Strategy):
    """Plays like ``inner`` for ``salvos`` salvos, then holds its turn open until ``go``."""

    def __init__(self, inner: Strategy, salvos: int, go: threading.Event) -> None:
        super().__init__()
        self.inner, self.left, self.go = inner, salvos, go

    def place_fleet(self) -> Any:
        return self.inner.place_fleet()

    def choose(self, view: View, shots: int) -> list[Shot]:
        if self.left <= 0:
            self.go.wait(60)
        self.left -= 1
        return self.inner.choose(view, shots)


def _counts(salvos: dict[int, dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Each player's (shots, hits) over the salvos, by turn."""
    out: dict[str, tuple[int, int]] = {}
    for s in salvos.values():
        shots, hits = out.get(s["player"], (0, 0))
        out[s["player"]] = (shots + s["shots"], hits + s["hits"])
    return out


def test_the_restarted_directors_projector_counts_the_whole_game(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """The director is restarted (SIGTERM, started again) after three salvos
    each: its projector's stream (/events on the console's server) counts
    every shot and hit of the game, as a page that watched it all did, not
    the retained last salvo alone."""
    names = ["ann", "bob"]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    go = threading.Event()

    def team(name: str) -> None:
        card = cards[name]
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
        with contextlib.suppress(ConnectionError):  # its client closed when the test is over: the game is not
            follow(broker, name, card.secret, lambda: HeldAfter(make_strategy("random", name), 3, go))

    watch = Recorder(Broker.from_url(mosq.url("referee")), ["/arena1/game/salvo", "/arena1/game/turn"])
    env = {**os.environ, "SALVO_CONSOLE_PASSWORD": "correct horse battery"}
    console = ("--console", "127.0.0.1:0", "--arenas", "1", "--turn-timeout", "60")
    cmd = director_cmd(mosq.url("referee"), tmp_path, registry, *console)
    second: subprocess.Popen[str] | None = None
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.DEVNULL, text=True)
    try:
        for name in names:
            threading.Thread(target=team, args=(name,), daemon=True).start()
        # Six salvos, then the seventh turn is held open: the game is in progress.
        watch.wait(lambda m: m.topic.endswith("/turn") and json.loads(m.payload or b"{}").get("turn") == 7, timeout=60)
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
        truth = _counts({(s := json.loads(m.payload))["turn"]: s for m in watch.messages if m.topic.endswith("/salvo")})
        assert sum(shots for shots, _ in truth.values()) == 30  # six salvos of five

        second = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
        assert second.stderr is not None
        lines: list[str] = []
        stderr = second.stderr
        threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")), daemon=True).start()
        wait_until(lambda: any("projector: " in line for line in lines), 30, "the projector's address")
        url = next(line for line in lines if line.startswith("projector: ")).split()[1]
        port = int(url.split(":")[2].split("/")[0])
        room = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        room.request("GET", "/events")
        stream = room.getresponse()
        salvos: dict[int, dict[str, Any]] = {}
        kind = ""
        while True:  # up to the retained /game/turn the broker hands over after everything else
            line = stream.readline().decode()
            assert line, "the stream ended"
            if line.startswith("event: "):
                kind = line.split(": ", 1)[1].strip()
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                if kind == "status" and data["reset"]:
                    salvos.clear()  # (the page starts over: the server's broker connection is new)
                elif kind == "" and data["topic"] == "/arena1/game/salvo" and data["payload"]:
                    salvo = json.loads(data["payload"])
                    salvos[salvo["turn"]] = salvo
                elif kind == "" and data["topic"] == "/arena1/game/turn" and data["retained"]:
                    break
            elif line == "\n":
                kind = ""
        room.close()
        assert _counts(salvos) == truth
    finally:
        go.set()
        for director in (first, second):
            if director is not None and director.poll() is None:
                director.send_signal(signal.SIGTERM)
                try:
                    director.wait(30)
                finally:
                    director.kill()
        watch.close()


def test_the_director_stops_with_its_referees_fatal_stop(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """The referee of the director's arenas stops for good (its journal can
    no longer be written: here deleted under it; an EIO in the review): the
    director used to run on for ever, arenas dead and bots waiting, and a
    later SIGTERM exited 0. It now stops with the referee's exit code (4)
    and reason (docs/tournament-night.md promises exit 4)."""
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    for n in ("ann", "bob"):
        add_team(registry, mosq.passwd, n)
    mosq.start()
    watch = Recorder(Broker.from_url(mosq.url("referee")), ["/arena1/game/server"])
    director = subprocess.Popen(
        director_cmd(mosq.url("referee"), tmp_path, registry), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        watch.wait(lambda m: m.payload == b"up", timeout=30, what="arena1 up")
        (tmp_path / "referee.db").unlink()
        _out, err = director.communicate(timeout=30)
    finally:
        watch.close()
        if director.poll() is None:
            director.kill()
    assert director.returncode == 4, err[-2000:]
    assert "referee.db" in err.strip().splitlines()[-1], err[-2000:]
