"""The organiser console of a real `salvo tournament run`, in headless
Chromium: the organiser pauses the game in progress from the page and the
teams see it paused on their arena's /game/deadline; resumed, the game and
the tournament finish."""

from __future__ import annotations

import json
import os
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
from salvo.sdk.strategy import Strategy
from salvo.sdk.view import Shot, View
from test_console_browser import PASSWORD, _click, _log_in, _text, _until, browser

from conftest import BrokerFactory

__all__ = ["browser"]  # the fixture, used by name


class Held(Strategy):
    """Plays like ``inner`` once ``go`` is set: until then its turn stays open."""

    def __init__(self, inner: Strategy, go: threading.Event) -> None:
        super().__init__()
        self.inner, self.go = inner, go

    def place_fleet(self) -> Any:
        return self.inner.place_fleet()

    def choose(self, view: View, shots: int) -> list[Shot]:
        self.go.wait(120)
        return self.inner.choose(view, shots)


def test_a_pause_from_the_console_is_what_the_teams_see(
    new_broker: BrokerFactory, tmp_path: Path, browser: Any
) -> None:
    names = ["ada", "bletchley"]
    mosq = new_broker(users={"referee": "referee-pw"})
    registry = tmp_path / "teams.json"
    cards = {n: add_team(registry, mosq.passwd, n) for n in names}
    mosq.start()
    go = threading.Event()
    played: dict[str, int] = {}

    def team(name: str) -> None:
        card = cards[name]
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, card.mqtt_password)
        played[name] = follow(broker, name, card.secret, lambda: Held(make_strategy("random", name), go))

    cmd = [
        *(sys.executable, "-m", "salvo", "tournament", "run", "--console", "127.0.0.1:0"),
        *("--broker", mosq.url("referee"), "--teams", str(registry), "--arenas", "1"),
        *("--state", str(tmp_path / "tournament.json"), "--referee-state", str(tmp_path / "referee.db")),
        *("--key-file", str(tmp_path / "referee.key"), "--turn-timeout", "60", "--reset-after", "0.5"),
    ]
    director = subprocess.Popen(
        cmd, cwd=tmp_path, env={**os.environ, "SALVO_CONSOLE_PASSWORD": PASSWORD}, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    assert director.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(director.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    teams_view = Recorder(Broker.from_url(mosq.url(None)), ["/arena1/game/deadline", "/arena1/game/state"])
    bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in names]
    for b in bots:
        b.start()
    try:
        wait_until(lambda: any("organiser console: " in line for line in lines), 30, "the console's address")
        url = next(line for line in lines if "organiser console: " in line).split(": ", 1)[1].strip()
        teams_view.wait_for("/arena1/game/state", "turn", timeout=60)

        browser.get(url)
        _until(browser, "the login form", lambda: _text(browser, "#login"))
        _log_in(browser, PASSWORD)
        card = 'article[data-arena="arena1"]'
        _until(browser, "the game in arena1", lambda: "ada vs bletchley" in _text(browser, card))

        mark = teams_view.mark()
        _click(browser, f'{card} button[data-action="pause-game"]')
        paused = teams_view.wait(
            lambda m: m.topic.endswith("/deadline") and bool(m.payload) and json.loads(m.payload).get("paused") is True,
            after=mark,
            timeout=15,
            what="the paused deadline",
        )
        assert json.loads(paused.payload)["left"] > 50  # the turn clock stopped with most of its 60 s left
        _until(browser, "arena1 shown paused", lambda: browser.find_elements("css selector", f"{card}.paused"))

        # The room's view, on the same server (the console's header links to it).
        assert browser.find_elements("css selector", '#room a[href="/projector"]')
        browser.get(url + "projector")
        room = 'article[data-arena="arena1"]'
        _until(browser, "the match on the projector", lambda: _text(browser, f"{room} .headline") == "ada vs bletchley")
        _until(browser, "the pause on the projector", lambda: _text(browser, f"{room} .countdown").startswith("PAUSED"))
        browser.get(url)
        _until(browser, "back on the console", lambda: "ada vs bletchley" in _text(browser, card))

        mark = teams_view.mark()
        _click(browser, f'{card} button[data-action="resume-game"]')
        teams_view.wait(
            lambda m: m.topic.endswith("/deadline") and bool(m.payload) and not json.loads(m.payload).get("paused"),
            after=mark,
            timeout=15,
            what="the running deadline again",
        )
        go.set()
        director.wait(120)
        for b in bots:
            b.join(30)
        assert director.returncode == 0, "".join(lines[-40:])
        assert played == {"ada": 1, "bletchley": 1}
    finally:
        go.set()
        if director.poll() is None:
            director.kill()
        teams_view.close()
        reader.join(5)
