"""The spectator page in a real browser (headless Debian Chromium driven by
Selenium) against a live game on a real mosquitto's websockets listener:
it must show the right turn, the salvo, sinks, the defeat, the winner and
the tournament standings. Screenshots go to build/screenshots/."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from salvo.cli import main
from salvo.spectate import PLACEHOLDER, SpectatorServer

from kit import COLUMNS, ROWS, all_cells
from mosquitto import ROOT, Mosquitto
from mqttkit import Recorder, Team

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SHOTS = ROOT / "build" / "screenshots"


def test_the_server_hands_out_the_page_pointed_at_the_broker() -> None:
    server = SpectatorServer(("127.0.0.1", 0), 'ws://venue:9001/"><script>')
    server.start()
    try:
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
        assert 'content="ws://venue:9001/&quot;&gt;&lt;script&gt;"' in body
        assert PLACEHOLDER not in body
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(server.url + "../etc/passwd", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    # Without --broker-ws the page falls back to its own host, port 9001.
    plain = SpectatorServer(("127.0.0.1", 0), None)
    assert PLACEHOLDER.encode() in plain.body
    plain.server_close()


def test_cli_refuses_a_non_websocket_broker() -> None:
    result = CliRunner().invoke(main, ["spectate", "--broker-ws", "mqtt://x:1883"])
    assert result.exit_code == 2 and "ws://" in result.output


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    """A broker of the page's own: its screenshot shows this game alone."""
    mosq = Mosquitto(tmp_path_factory.mktemp("spectate-broker"))
    mosq.start()
    yield mosq
    mosq.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("SALVO_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromedriver are required (apt-get install -y chromium chromium-driver)")
        pytest.skip("no chromium/chromedriver here (bash .ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,900",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    yield driver
    driver.quit()


def _text(driver: Any, selector: str) -> str:
    """innerText of the first match, read in one step: the page redraws its
    elements on every message, so a found element can go stale at once."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
    return str(driver.execute_script(script, selector))


def _card_text(driver: Any, prefix: str) -> str:
    return _text(driver, f'article[data-arena="{prefix}"]')


def _until(driver: Any, what: str, check: Any, timeout: float = 20) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: check())
    except Exception:
        SHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SHOTS / "spectate-failure.png"))
        raise AssertionError(f"the page never showed {what}; it shows:\n{_text(driver, 'body')}") from None


@pytest.mark.mqtt
def test_the_page_follows_a_live_game_in_chromium(
    broker: Mosquitto, start_referee: Any, make_team: Any, watcher: Recorder, prefix: str, browser: Any
) -> None:
    server = SpectatorServer(("127.0.0.1", 0), f"ws://127.0.0.1:{broker.ws_port}")
    server.start()
    try:
        browser.get(server.url)
        _until(browser, "the live connection", lambda: "live from" in _text(browser, "#conn"))
        start_referee(turn_timeout=15, reset_after=60, seed=3)
        _until(browser, "the arena in its lobby", lambda: "LOBBY" in _card_text(browser, prefix).upper())

        fleets = {"alice": ROWS, "bob": COLUMNS}
        teams: dict[str, Team] = {n: make_team(n) for n in fleets}
        for team in teams.values():
            team.join()
        watcher.wait_for(f"/{prefix}/players/count", "2")
        for name, team in teams.items():
            team.place_fleet(fleets[name])
        first = watcher.wait(lambda m: m.topic.endswith("/game/turn")).json()["player"]
        other = next(n for n in fleets if n != first)
        _until(browser, "turn 1", lambda: f"Turn 1: {first} fires 5 shots" in _card_text(browser, prefix))
        current = f'article[data-arena="{prefix}"] tr.current[data-player="{first}"]'
        _until(browser, "the current player marked", lambda: _text(browser, current))  # /game/current comes after /turn
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "spectate-turn.png"))

        # `first` shoots the other fleet cell by cell (then water, to fill its
        # last salvo); `other` only finds water.
        def water(fleet: dict[str, Any]) -> list[tuple[int, int]]:
            return [(x, y) for y in range(10) for x in range(10) if (x, y) not in all_cells(fleet)]

        aims = {first: iter(all_cells(fleets[other]) + water(fleets[other])), other: iter(water(fleets[first]))}
        turn = 1
        while True:
            msg = watcher.wait(
                lambda m, n=turn: (
                    m.payload != b""
                    and (m.topic.endswith("/game/winner") or (m.topic.endswith("/game/turn") and m.json()["turn"] == n))
                )
            )
            if msg.topic.endswith("/game/winner"):
                break
            info = msg.json()
            shooter = info["player"]
            for _ in range(info["shots"]):
                teams[shooter].fire(other if shooter == first else first, *next(aims[shooter]))
            if turn == 1:
                _until(
                    browser,
                    "turn 1's salvo",
                    lambda: f"Last salvo: {first}, 5 hits of 5" in _card_text(browser, prefix),
                )
                _until(browser, "the carrier sunk", lambda: f"{other}'s carrier sunk" in _card_text(browser, prefix))
            turn += 1
        last_turn = turn - 1

        _until(browser, "the winner", lambda: f"Winner: {first}" in _card_text(browser, prefix))
        _until(browser, "the final turn", lambda: f"Game over after turn {last_turn}" in _card_text(browser, prefix))
        loser = _text(browser, f'article[data-arena="{prefix}"] tr.defeated[data-player="{other}"]')
        assert loser.split()[:2] == [other, "5"]  # five ships sunk
        _until(browser, "the defeat", lambda: f"{other} is defeated" in _card_text(browser, prefix))

        standings = {
            "format": "round-robin",
            "rounds": 1,
            "games_played": 1,
            "table": [
                {
                    "team": first,
                    "played": 1,
                    "wins": 1,
                    "draws": 0,
                    "losses": 0,
                    "points": 2,
                    "shots": 17,
                    "hits": 17,
                    "accuracy": 1.0,
                },
                {
                    "team": other,
                    "played": 1,
                    "wins": 0,
                    "draws": 0,
                    "losses": 1,
                    "points": 0,
                    "shots": 15,
                    "hits": 0,
                    "accuracy": 0.0,
                },
            ],
        }
        watcher.publish("/tournament/standings", json.dumps(standings), retain=True)
        _until(browser, "the standings", lambda: "1 game played" in _text(browser, "#standings"))
        top = _text(browser, "#standings tbody tr").split()
        assert top[:2] == ["1", first] and top[6] == "2" and top[-1] == "100.0%"
        browser.save_screenshot(str(SHOTS / "spectate-winner.png"))

        # The broker restarts during the evening: the page reconnects by
        # itself and shows the same (retained) state again.
        assert browser.execute_script("return window.salvoConnections") == 1
        broker.restart()
        _until(browser, "a reconnection", lambda: browser.execute_script("return window.salvoConnections") == 2, 30)
        _until(browser, "the winner again", lambda: f"Winner: {first}" in _card_text(browser, prefix))
        _until(browser, "the standings again", lambda: "1 game played" in _text(browser, "#standings"))
    finally:
        server.shutdown()
        server.server_close()
