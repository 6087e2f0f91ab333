"""The projector during a real tournament: `salvo tournament run` with
paced play and bot teams, `salvo spectate`'s server, headless Chromium at
1920x1080. The room sees the match headline, a replay of the finished game
with a board cell marked hit, and the champion at the end."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import test_spectate
from salvo.net.mqtt import Broker
from salvo.organiser.teams import add_team
from salvo.sdk.bots import make_strategy
from salvo.sdk.follow import follow
from salvo.web.spectate import SpectatorServer
from test_projector import projector

from conftest import BrokerFactory

browser, _text, _until = test_spectate.browser, test_spectate._text, test_spectate._until
__all__ = ["browser", "projector"]  # fixtures, used by name


def test_the_room_follows_a_real_tournament(new_broker: BrokerFactory, tmp_path: Path, projector: Any) -> None:
    names = ["ada", "bob", "cat"]  # one arena, three games: a replay while the next waits for the reset
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    server = SpectatorServer(("127.0.0.1", 0), Broker.from_url(mosq.url(None)))  # anonymous, as in compose
    server.start()
    played: dict[str, int] = {}

    def team(name: str) -> None:
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, cards[name].mqtt_password)
        played[name] = follow(broker, name, cards[name].secret, lambda: make_strategy("hunt-target", name))

    cmd = [
        *(sys.executable, "-m", "salvo", "tournament", "run", "--console", "off"),
        *("--broker", mosq.url("referee"), "--teams", str(registry), "--arenas", "1"),
        *("--state", str(tmp_path / "t.json"), "--referee-state", str(tmp_path / "referee.db")),
        *("--key-file", str(tmp_path / "referee.key"), "--pace", "0.05", "--reset-after", "8"),
    ]
    log = tmp_path / "director.log"
    director = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in names]
    for b in bots:
        b.start()
    card = 'article[data-arena="arena1"]'
    try:
        projector.get(server.url)
        _until(projector, "a match headline", lambda: " vs " in _text(projector, f"{card} .headline"), 60)
        headline = _text(projector, f"{card} .headline")
        assert sum(n in headline for n in names) == 2, headline
        _until(projector, "the round", lambda: "round 1" in _text(projector, card).lower(), 30)
        # The finished game played back on its boards while the arena waits for its reset.
        _until(projector, "a replay", lambda: "REPLAY" in _text(projector, card).upper(), 90)
        hit = f"{card} .cell.hit"
        _until(
            projector,
            "a replayed hit",
            lambda: projector.execute_script(f"return !!document.querySelector('{hit}')"),
            30,
        )
        out = director.communicate(timeout=180)[0]
        assert director.returncode == 0, log.read_text()[-3000:]
        champion = out.splitlines()[1].split()[1]  # the printed ranking's first team
        _until(projector, "the champion", lambda: champion in _text(projector, "#champion"), 30)
        for b in bots:
            b.join(30)
        assert played == dict.fromkeys(names, 2)
    finally:
        if director.poll() is None:
            director.kill()
        server.close()
