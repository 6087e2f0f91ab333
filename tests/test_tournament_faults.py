"""Tournament nights under faults (issue 29; the review ran 4 tournaments,
41 games, 78 faults): the director, and so the referee it runs, killed
with SIGKILL or stopped with SIGTERM (docker compose stop) at random
instants and started again, and the broker restarted (with persistence),
while five teams' bots play a round robin on two arenas. What must hold,
whatever the faults: every pair plays exactly once, nothing is forfeited or
played twice, no team is sent home early or listed in two arenas at once,
and each team's bot is told of exactly its four games.

``pytest -m long`` runs one tournament; the at-size run is
``SALVO_TOURNAMENT_FAULTS=4 pytest -q -m long -s tests/test_tournament_faults.py``
(docs/reliability.md has its figures)."""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from salvo.net.mqtt import Broker
from salvo.net.watch import Msg, Recorder
from salvo.organiser.teams import Card, add_team
from salvo.sdk.outcomes import GameRecord
from salvo.spec.topics import TournamentTopics
from test_tournament_restart import director_cmd, overlaps, start_bots

from conftest import BrokerFactory
from mosquitto import Mosquitto

NAMES = ["ann", "bob", "cat", "dan", "eve"]  # odd: a bye each round, rounds overlap
#: At most this many faults a tournament; then it is left to finish.
MAX_FAULTS = 22


def _finished(state_file: Path) -> bool:
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return False
    return len(state.get("results", [])) == len(NAMES) * (len(NAMES) - 1) // 2 and not state.get("live")


def _as_the_broker_held(watch: Recorder) -> list[Msg]:
    """The players lists in order, as the broker held them: a list cleared
    while the watcher was away (a broker restart) leaves no message, so at
    each reconnect every list is taken as empty until the broker sends it
    again (its retained messages come first)."""
    out: list[Msg] = []
    reconnects = set(watch.connections[1:])
    for i, m in enumerate(watch.messages):
        if i in reconnects:
            out += [Msg(f"/{arena}/players/list", b"", True, m.at) for arena in ("arena1", "arena2")]
        if m.topic.endswith("/players/list"):
            out.append(m)
    return out


def _tournament(
    mosq: Mosquitto, workdir: Path, registry: Path, cards: dict[str, Card], rng: random.Random
) -> collections.Counter[str]:
    """One round robin under faults; the faults injected, by kind."""
    workdir.mkdir()
    records, returned, errors = {n: list[GameRecord]() for n in NAMES}, dict[str, int](), dict[str, str]()
    watch = Recorder(Broker.from_url(mosq.url("referee")), ["/+/players/list", "/+/game/state"])
    for name in NAMES:
        # The last night's {"done": true} is still retained: a bot started
        # before this night's director clears it would go home at once.
        watch.publish(TournamentTopics.assignment(name), "", retain=True)
    bots = start_bots(mosq.port, cards, records, returned, errors)
    cmd = director_cmd(mosq.url("referee"), workdir, registry)
    state_file, log = workdir / "tournament.json", workdir / "director.log"
    faults: collections.Counter[str] = collections.Counter()
    end = time.monotonic() + 900
    try:
        while True:
            with log.open("a") as err:
                director = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
            try:
                code = director.wait(rng.uniform(0.3, 2.0) if sum(faults.values()) < MAX_FAULTS else 600)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:  # it ended by itself: the tournament is over (or it failed)
                assert code == 0 and _finished(state_file), f"director exited {code}: {log.read_text()[-3000:]}"
                break
            assert time.monotonic() < end, "the tournament did not finish in 15 minutes"
            kind = rng.choices(["SIGKILL", "SIGTERM", "broker restart"], weights=[5, 3, 2])[0]
            faults[kind] += 1
            if kind == "broker restart":
                mosq.restart()  # with persistence: sessions and retained topics kept
                try:
                    code = director.wait(rng.uniform(1.0, 5.0))  # it rides the outage out
                except subprocess.TimeoutExpired:
                    code = None
                if code is None:
                    director.send_signal(signal.SIGTERM)
                    faults["SIGTERM"] += 1
                    # (-15: it was still starting, or already past its handler at the end)
                    assert director.wait(30) in (0, -signal.SIGTERM), log.read_text()[-3000:]
                else:  # (it may have finished meanwhile)
                    assert code == 0 and _finished(state_file), log.read_text()[-3000:]
                    break
            else:
                director.send_signal(getattr(signal, kind))
                code = director.wait(30)
                if code == 0 and _finished(state_file):  # it had just finished the tournament
                    break
                # SIGTERM pauses (exit 0: nothing sent home), or ends a director
                # still starting or already done (-15: before or after its handler);
                # SIGKILL is SIGKILL
                want = (0, -signal.SIGTERM) if kind == "SIGTERM" else (-signal.SIGKILL,)
                assert code in want, f"{kind}: exit {code}: {log.read_text()[-3000:]}"
                time.sleep(rng.uniform(0.0, 1.0))  # (the organiser's hand on the command line)
        for b in bots:
            b.join(60)
        assert errors == {}, errors
        assert returned == dict.fromkeys(NAMES, 4), returned  # each played its four games, then was told done
        results = json.loads(state_file.read_text())["results"]
        assert sorted(tuple(sorted(r["players"])) for r in results) == sorted(itertools.combinations(NAMES, 2))
        assert all(r["status"] == "played" and not r["forfeited"] and r["stats"] for r in results), results
        found = overlaps(_as_the_broker_held(watch))
        # (on failure: the lists and states as heard, and the director's log without the shots)
        heard = "\n".join(f"{m.at:.3f} {m.topic} {m.text}" for m in watch.messages)
        story = "\n".join(line[:200] for line in log.read_text().splitlines() if "accept " not in line)
        assert found == [], f"{found}\n{heard}\n{story[-8000:]}"
        assert all(len(records[n]) == 4 for n in NAMES)
    finally:
        watch.close()
    return faults


@pytest.mark.long
def test_round_robins_under_faults_play_every_pair_once(new_broker: BrokerFactory, tmp_path: Path) -> None:
    tournaments = int(os.environ.get("SALVO_TOURNAMENT_FAULTS", "1"))
    rng = random.Random(int(os.environ.get("SALVO_TOURNAMENT_SEED", "7")))
    mosq = new_broker(users={"referee": "referee-pw"}, persistence=True)
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in NAMES}
    mosq.start()
    total: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    try:
        for k in range(tournaments):
            total += _tournament(mosq, tmp_path / f"night{k}", registry, cards, rng)
    finally:
        mosq.stop()
    games = tournaments * len(NAMES) * (len(NAMES) - 1) // 2
    print(
        f"\n{tournaments} tournament(s), {games} games, {sum(total.values())} faults ({dict(total)}),"
        f" {time.monotonic() - started:.0f} s: every pair once, nothing forfeited, nobody sent home"
    )
