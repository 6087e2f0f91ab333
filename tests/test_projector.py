"""The projector page as the room sees it, in real headless Chromium at
1920x1080: an arena's headline (both teams, the round), the live turn and its
countdown (and PAUSED), salvo results counted live, sinks as they happen,
the finished game replayed on boards, nothing of a game left after its
reset, and the champion when the tournament is done. The topics are
published here as the referee and the director would (retained where they
retain), so every step is known; tests/test_spectate.py follows a real
referee. Screenshots of each screen go to build/screenshots/, or with
SALVO_DOC_SCREENSHOTS=1 to docs/screenshots/ (the ones the guide shows)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import test_spectate
from salvo.spectate import SpectatorServer
from test_replay_viewer import make_record

from mosquitto import ROOT
from mqttkit import Recorder

broker, serve, tidy, browser = test_spectate.broker, test_spectate.serve, test_spectate.tidy, test_spectate.browser
_text, _until = test_spectate._text, test_spectate._until

DOCS_SHOTS = ROOT / ("docs" if os.environ.get("SALVO_DOC_SCREENSHOTS") else "build") / "screenshots"
SCHEDULE = {
    "round": 2,
    "games": [["alice", "bob"], ["carol", "dave"]],
    "fixtures": [
        {"round": 1, "teams": ["alice", "carol"], "done": True},
        {"round": 2, "teams": ["alice", "bob"], "done": False},
        {"round": 2, "teams": ["carol", "dave"], "done": False},
        {"round": 3, "teams": ["alice", "dave"], "done": False},
        {"round": 3, "teams": ["bob", "carol"], "done": False},
    ],
}


def _row(team: str, played: int, wins: int, losses: int, points: int, buchholz: int, **extra: Any) -> dict[str, Any]:
    return {
        "team": team,
        "played": played,
        "wins": wins,
        "draws": 0,
        "losses": losses,
        "forfeits": 0,
        "points": points,
        "buchholz": buchholz,
        "hits": 17 * wins,
        "shots": 30 * played,
        "accuracy": 0.5,
        **extra,
    }


STANDINGS = {
    "format": "swiss",
    "table_size": 2,
    "rounds": 3,
    "games_played": 2,
    "paused": False,
    "done": False,
    "table": [
        _row("alice", 1, 1, 0, 2, 0),
        _row("carol", 1, 1, 0, 2, 0),
        _row("bob", 1, 0, 1, 0, 2),
        _row("dave", 1, 0, 1, 0, 2, forfeits=1),
    ],
}


@pytest.fixture
def prefix() -> str:
    """An arena named as on a tournament night (this module's broker is its own)."""
    return "arena1"


@pytest.fixture
def projector(browser: Any) -> Any:
    """The browser with a 1920x1080 page (the window's chrome added on)."""
    browser.set_window_size(1920, 1080)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(1920 + 1920 - inner[0], 1080 + 1080 - inner[1])
    return browser


@pytest.fixture
def tournament(tidy: Recorder) -> Iterator[Recorder]:
    """The watcher, and the tournament's topics cleared afterwards."""
    yield tidy
    for topic in ("/tournament/schedule", "/tournament/standings"):
        tidy.publish(topic, "", retain=True)


def _px(driver: Any, selector: str) -> float:
    script = "const e = document.querySelector(arguments[0]); return e ? getComputedStyle(e).fontSize : '0px';"
    return float(str(driver.execute_script(script, selector)).removesuffix("px"))


def _cell(driver: Any, arena: str, board: str, x: int, y: int) -> str:
    script = (
        "const e = document.querySelector(`article[data-arena='${arguments[0]}'] [data-board='${arguments[1]}']"
        " .cell[data-x='${arguments[2]}'][data-y='${arguments[3]}']`); return e ? e.className : '';"
    )
    return str(driver.execute_script(script, arena, board, x, y))


def _seconds(text: str) -> int | None:
    return int(text[:-1]) if text.endswith("s") and text[:-1].isdigit() else None


def test_the_projector_shows_the_room_a_game_its_replay_and_the_champion(
    serve: Callable[..., SpectatorServer], tournament: Recorder, prefix: str, projector: Any
) -> None:
    w, p = tournament, f"/{prefix}"
    card = f'article[data-arena="{prefix}"]'
    w.publish("/tournament/schedule", json.dumps(SCHEDULE), retain=True)
    w.publish("/tournament/standings", json.dumps(STANDINGS), retain=True)
    w.publish(f"{p}/game/state", "turn", retain=True)
    w.publish(f"{p}/players/list", '["alice","bob"]', retain=True)
    # A team of the last game that is not in this one: never listed (no ghost rows).
    w.publish(f"{p}/players/zed/defeated", "true", retain=True)
    w.publish(f"{p}/game/salvo", '{"turn":1,"player":"alice","shots":5,"hits":5}', retain=True)
    w.publish(f"{p}/players/bob/ships/carrier/sunk", "true", retain=True)
    server = serve()
    projector.get(server.url)
    _until(projector, "the headline", lambda: _text(projector, f"{card} .headline") == "alice vs bob")
    assert "round 2" in _text(projector, card) and _text(projector, "#round") == "Round 2"
    # Not yet played, nor on an arena now (alice vs carol is done, alice vs bob is on).
    assert _text(projector, "#next") == "Next: carol vs dave · alice vs dave · bob vs carol"
    assert "zed" not in _text(projector, card)

    # The live turn, its countdown ticking down, the salvo counted as it comes.
    w.publish(f"{p}/game/deadline", json.dumps({"phase": "turn", "at": round(time.time() + 40, 3)}), retain=True)
    w.publish(f"{p}/game/turn", '{"turn":2,"player":"bob","shots":4}', retain=True)
    w.publish(f"{p}/game/current", "bob", retain=True)
    _until(projector, "the turn", lambda: "Turn 2: bob fires 4 shots" in _text(projector, card))
    _until(projector, "a countdown", lambda: (_seconds(_text(projector, f"{card} .countdown")) or 0) > 30)
    first = _seconds(_text(projector, f"{card} .countdown"))
    assert first is not None
    _until(projector, "the countdown ticking", lambda: (_seconds(_text(projector, f"{card} .countdown")) or 99) < first)
    alice = _text(projector, f'{card} tr[data-player="alice"]').split()
    assert alice == ["alice", "5", "1", "5", "5"]  # 5 ships left, 1 sunk (bob's carrier), 5 shots, 5 hits
    assert _text(projector, f'{card} tr.current[data-player="bob"]').split()[:2] == ["bob", "4"]
    assert "bob's carrier sunk" in _text(projector, f"{card} .feed")
    w.publish(f"{p}/game/salvo", '{"turn":2,"player":"bob","shots":4,"hits":1}', retain=True)
    _until(projector, "the live salvo", lambda: "Last salvo: bob, 1 hit of 4" in _text(projector, card))
    _until(
        projector,
        "bob's shots counted",
        lambda: _text(projector, f'{card} tr[data-player="bob"]').split()[3:] == ["4", "1"],
    )

    # Readable from the back of the room: key text at 32 px or more.
    for selector in (
        f"{card} .headline",
        f"{card} [data-testid=turn]",
        f"{card} .countdown",
        f"{card} [data-testid=salvo]",
        f"{card} tbody td",
        "#standings tbody td",
        "#round",
    ):
        assert _px(projector, selector) >= 32, selector
    DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
    projector.save_screenshot(str(DOCS_SHOTS / "projector-live.png"))

    # The organiser holds the clock.
    paused = {"phase": "turn", "at": round(time.time() + 17, 3), "paused": True, "left": 17.25}
    w.publish(f"{p}/game/deadline", json.dumps(paused), retain=True)
    _until(projector, "PAUSED", lambda: _text(projector, f"{card} .countdown") == "PAUSED 18s")

    # Game over: the record is replayed on boards, salvo by salvo.
    record = make_record("g-projector")
    w.publish(f"{p}/game/deadline", json.dumps({"phase": "reset", "at": round(time.time() + 300, 3)}), retain=True)
    w.publish(f"{p}/game/winner", "alice", retain=True)
    w.publish(f"{p}/game/state", "over", retain=True)
    w.publish(f"{p}/game/record", json.dumps(record), retain=True)
    _until(projector, "the winner", lambda: "Winner: alice" in _text(projector, card))
    _until(projector, "the replay's fleets", lambda: "ship" in _cell(projector, prefix, "bob", 5, 0).split())
    _until(projector, "a replayed hit", lambda: "hit" in _cell(projector, prefix, "bob", 5, 0).split(), 10)
    _until(projector, "the replay moving on", lambda: "hit" in _cell(projector, prefix, "bob", 6, 3).split(), 15)
    projector.save_screenshot(str(DOCS_SHOTS / "projector-replay.png"))

    # The reset: nothing of that game stays up.
    for topic in ("game/record", "game/winner", "game/salvo", "game/turn", "players/bob/ships/carrier/sunk"):
        w.publish(f"{p}/{topic}", "", retain=True)
    w.publish(f"{p}/game/state", "lobby", retain=True)
    w.publish(f"{p}/players/list", '["carol"]', retain=True)
    _until(projector, "the next lobby", lambda: "Lobby: 1 player joined" in _text(projector, card))
    text = _text(projector, card)
    assert "alice" not in text and "bob" not in text and "Replay" not in text, text

    # The tournament is done: its champion, not stopped referees.
    w.publish(f"{p}/game/server", "down", retain=True)
    done = {**STANDINGS, "done": True, "games_played": 6}
    done["table"] = [_row("carol", 3, 3, 0, 6, 4), _row("alice", 3, 2, 1, 4, 6), _row("bob", 3, 1, 2, 2, 8)]
    w.publish("/tournament/standings", json.dumps(done), retain=True)
    _until(projector, "the champion", lambda: _text(projector, "#champion [data-testid=champion-team]") == "carol")
    assert projector.find_element("id", "champion").is_displayed()
    assert "2. alice" in _text(projector, "#champion") and _px(projector, "#champion .team") >= 32
    projector.save_screenshot(str(DOCS_SHOTS / "projector-champion.png"))
