"""The replay viewer (``/replay``, ``salvo replay FILE``): a finished game's
record on boards, stepped, scrubbed and played in real headless Chromium,
with an address that points at the salvo shown. The records are built here
from the rules (a valid game: the salvo rule, sinks, the defeat), published
retained by the test where a broker is involved. With SALVO_DOC_SCREENSHOTS=1
the viewer's screenshot goes to docs/screenshots/ (the guide shows it), else
to build/screenshots/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import test_spectate
from salvo.cli import ExitCode, main
from salvo.spec.rules import FLEET, SHIP_IDS, Placement
from salvo.web.spectate import SpectatorServer, read_records

from chromium import SHOTS
from kit import COLUMNS, ROWS, all_cells
from mosquitto import ROOT
from mqttkit import Recorder, wait_until

# The spectator page's fixtures and helpers: its own broker, a server on it, a headless Chromium.
broker, serve, tidy, browser = test_spectate.broker, test_spectate.serve, test_spectate.tidy, test_spectate.browser
_text, _until = test_spectate._text, test_spectate._until
# The documentation's own screenshots are written into docs/ only on purpose
# (SALVO_DOC_SCREENSHOTS=1); otherwise beside the other tests' (chromium.SHOTS).
DOCS_SHOTS = ROOT / "docs" / "screenshots" if os.environ.get("SALVO_DOC_SCREENSHOTS") else SHOTS


def full_hd(driver: Any) -> Any:
    """The browser with a 1920x1080 page, as on a projector (the window's chrome added on)."""
    driver.set_window_size(1920, 1080)
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(1920 + 1920 - inner[0], 1080 + 1080 - inner[1])
    return driver


def make_record(game: str = "g-replay-1", fleets: dict[str, dict[str, Placement]] | None = None) -> dict[str, Any]:
    """A whole game as /game/record spells it (docs/protocol.md section 7):
    the first player shoots the second's fleet cell by cell, the second finds
    only water; each fires as many shots as it has ships afloat."""
    fleets = fleets or {"alice": ROWS, "bob": COLUMNS}
    first, second = list(fleets)
    cells = {
        n: {xy: s for s in SHIP_IDS for xy in [(c % 10, c // 10) for c in f[s].cells(FLEET[s])]}
        for n, f in fleets.items()
    }
    water = {n: [(x, y) for y in range(10) for x in range(10) if (x, y) not in cells[n]] for n in fleets}
    aims = {first: iter(all_cells(fleets[second]) + water[second]), second: iter(water[first])}
    damage: dict[str, dict[str, int]] = {n: dict.fromkeys(SHIP_IDS, 0) for n in fleets}
    sunk: dict[str, list[str]] = {n: [] for n in fleets}
    salvos: list[dict[str, Any]] = []
    turn = 0
    while len(sunk[second]) < len(SHIP_IDS):
        turn += 1
        shooter = first if turn % 2 else second
        target = second if shooter == first else first
        shots: list[dict[str, Any]] = []
        now_sunk: list[dict[str, str]] = []
        for _ in range(len(SHIP_IDS) - len(sunk[shooter])):
            x, y = next(aims[shooter])
            ship = cells[target].get((x, y))
            shots.append({"target": target, "x": x, "y": y, "hit": ship is not None})
            if ship:
                damage[target][ship] += 1
        for ship in SHIP_IDS:
            if damage[target][ship] == FLEET[ship] and ship not in sunk[target]:
                sunk[target].append(ship)
                now_sunk.append({"owner": target, "ship": ship})
        defeated = [target] if len(sunk[target]) == len(SHIP_IDS) else []
        hits = sum(s["hit"] for s in shots)
        salvos.append(
            {"turn": turn, "player": shooter, "shots": shots, "hits": hits, "sunk": now_sunk, "defeated": defeated}
        )
    return {
        "game": game,
        "players": [first, second],
        "fleets": {
            n: {s: {"x": p.x, "y": p.y, "orientation": p.orientation.value} for s, p in f.items()}
            for n, f in fleets.items()
        },
        "salvos": salvos,
        "winner": first,
        "termination": "victory",
    }


RECORD = make_record()


def test_the_record_built_here_is_a_whole_game() -> None:
    assert [s["player"] for s in RECORD["salvos"]] == ["alice", "bob"] * 3 + ["alice"]
    assert [len(s["shots"]) for s in RECORD["salvos"]] == [5, 4, 5, 3, 5, 1, 5]  # ships afloat
    assert sum(s["hits"] for s in RECORD["salvos"]) == 17
    assert RECORD["salvos"][-1]["defeated"] == ["bob"]


def test_records_are_read_from_a_record_or_a_journal_export() -> None:
    one = json.dumps(RECORD)
    assert [json.loads(r) for r in read_records(one)] == [RECORD]
    other = make_record("g-2")
    lines = "\n".join([json.dumps({"event": "joined"}), json.dumps(RECORD), json.dumps({"record": other}), "garbage"])
    assert [json.loads(r)["game"] for r in read_records(lines)] == ["g-replay-1", "g-2"]
    assert read_records('{"game": "x"}') == [] and read_records("") == []


def test_the_server_hands_out_records_by_game_and_arena() -> None:
    server = SpectatorServer(("127.0.0.1", 0), None, records=[json.dumps(RECORD).encode()])
    server.start()
    try:

        def get(query: str) -> Any:
            return json.loads(urllib.request.urlopen(server.url + "record" + query, timeout=5).read())

        assert get("") == RECORD and get("?game=g-replay-1") == RECORD
        server.hub.message("/arena9/game/record", json.dumps(make_record("g-9")).encode(), retained=True)
        assert get("?arena=arena9")["game"] == "g-9" and get("?game=g-9")["game"] == "g-9"
        server.hub.message("/arena9/game/record", b"", retained=True)  # reset: the arena moved on
        with pytest.raises(urllib.error.HTTPError, match="404"):
            get("?arena=arena9")
        assert get("?game=g-9")["game"] == "g-9"  # a link to it stays good
        for path in ("replay", "replay.js", "board.js", "spectate.css"):
            assert urllib.request.urlopen(server.url + path, timeout=5).status == 200
    finally:
        server.close()


def _position(driver: Any) -> str:
    return _text(driver, "#position")


def _cell(driver: Any, board: str, x: int, y: int) -> str:
    script = (
        "const e = document.querySelector(`[data-board='${arguments[0]}'] .cell[data-x='${arguments[1]}']"
        "[data-y='${arguments[2]}']`); return e ? e.className : '';"
    )
    return str(driver.execute_script(script, board, x, y))


@pytest.fixture
def viewer() -> Iterator[SpectatorServer]:
    server = SpectatorServer(("127.0.0.1", 0), None, records=[json.dumps(RECORD).encode()])
    server.start()
    yield server
    server.close()


def test_the_viewer_steps_scrubs_and_plays_a_record(viewer: SpectatorServer, browser: Any) -> None:
    full_hd(browser).get(viewer.url + "replay")
    _until(browser, "the fleets", lambda: _position(browser) == "salvo 0 of 7")
    assert "ship" in _cell(browser, "bob", 5, 0) and "hit" not in _cell(browser, "bob", 5, 0)
    browser.find_element("id", "forward").click()
    _until(browser, "salvo 1", lambda: _position(browser) == "salvo 1 of 7")
    assert "Turn 1: alice, 5 hits of 5 — bob's carrier sunk" in _text(browser, "#line")
    _until(
        browser, "a hit on bob's carrier", lambda: {"hit", "sunk", "fresh"} <= set(_cell(browser, "bob", 5, 4).split())
    )
    _until(browser, "the salvo in the address", lambda: browser.current_url.endswith("#game=g-replay-1&salvo=1"))
    browser.find_element("id", "forward").click()
    _until(browser, "bob's misses", lambda: "miss" in _cell(browser, "alice", 5, 0).split())
    browser.find_element("id", "back").click()
    _until(browser, "back to salvo 1", lambda: "miss" not in _cell(browser, "alice", 5, 0))
    # Scrub to the end: the winner, the defeat.
    browser.execute_script(
        "const r = document.getElementById('scrub'); r.value = 7; r.dispatchEvent(new Event('input'));"
    )
    _until(
        browser,
        "the end",
        lambda: "alice wins" in _text(browser, "#line") and "bob is defeated" in _text(browser, "#line"),
    )
    assert browser.execute_script("return [innerWidth, innerHeight]") == [1920, 1080]
    DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(DOCS_SHOTS / "replay-viewer.png"))
    # Play from the start at 4x: it runs to the end by itself and stops.
    browser.find_element("id", "first").click()
    browser.execute_script(
        "const s = document.getElementById('speed'); s.value = '4'; s.dispatchEvent(new Event('change'));"
    )
    browser.find_element("id", "play").click()
    _until(browser, "playing", lambda: _position(browser) not in ("salvo 0 of 7", ""))
    _until(browser, "the end, played", lambda: _position(browser) == "salvo 7 of 7", 15)
    _until(browser, "stopped", lambda: _text(browser, "#play") == "play")


def test_a_shared_link_opens_the_same_salvo(viewer: SpectatorServer, browser: Any) -> None:
    bare = SpectatorServer(("127.0.0.1", 0), None)  # knows no record of its own
    bare.start()
    try:
        viewer.hub.keep_record(json.dumps(make_record("g-shared")).encode())
        browser.get(viewer.url + "replay#game=g-shared&salvo=3")
        _until(browser, "salvo 3", lambda: _position(browser) == "salvo 3 of 7")
        assert "Turn 3: alice" in _text(browser, "#line")
        browser.get(bare.url + "replay#game=nowhere&salvo=3")
        _until(browser, "no such record", lambda: "No record for that game" in _text(browser, "#drop"))
    finally:
        bare.close()


def test_tonights_games_are_listed_and_open_in_the_viewer(browser: Any) -> None:
    bare = SpectatorServer(("127.0.0.1", 0), None)  # as on the console: no record of its own
    bare.start()
    try:
        for game in ("g-early", "g-late"):  # as the broker delivers them at game over
            bare.hub.message("/arena1/game/record", json.dumps(make_record(game)).encode(), retained=True)
        browser.get(bare.url + "replay")
        _until(browser, "tonight's games", lambda: len(browser.find_elements("css selector", "#games li")) == 2)
        lines = _text(browser, "#games").splitlines()
        assert [line.rsplit(" · ", 1)[0] for line in lines] == ["alice vs bob · alice wins · arena1"] * 2
        assert all(re.fullmatch(r"\d\d:\d\d", line.rsplit(" · ", 1)[1]) for line in lines), lines  # when
        assert not browser.find_element("id", "controls").is_displayed()  # nothing to play yet
        browser.find_elements("css selector", "#games a")[1].click()  # the older one: newest first
        _until(browser, "the picked game", lambda: "g-early" in _text(browser, "#title"))
        assert _position(browser) == "salvo 0 of 7" and "#game=g-early" in browser.current_url
    finally:
        bare.close()


def test_a_dropped_file_is_replayed(browser: Any, tmp_path: Path) -> None:
    bare = SpectatorServer(("127.0.0.1", 0), None)
    bare.start()
    export = tmp_path / "journal.jsonl"
    export.write_text(json.dumps({"event": "x"}) + "\n" + json.dumps(make_record("g-file")) + "\n")
    try:
        browser.get(bare.url + "replay")
        _until(browser, "the file chooser", lambda: browser.execute_script("return window.salvoReplayReady === true"))
        browser.find_element("id", "file").send_keys(str(export))
        _until(browser, "the file's game", lambda: _position(browser) == "salvo 0 of 7")
        assert "g-file" in _text(browser, "#title")
    finally:
        bare.close()


def test_an_arenas_current_record_from_the_broker(
    serve: Callable[..., SpectatorServer], tidy: Recorder, prefix: str, browser: Any
) -> None:
    tidy.publish(f"/{prefix}/game/record", json.dumps(make_record("g-arena")), retain=True)
    server = serve()
    wait_until(lambda: f"/{prefix}/game/record" in server.hub.snapshot(), what="the record")
    browser.get(server.url + f"replay?arena={prefix}#salvo=7")
    _until(browser, "the arena's record at its end", lambda: _position(browser) == "salvo 7 of 7")
    assert "g-arena" in _text(browser, "#title")


def test_cli_replay_serves_a_file_and_prints_its_address(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(RECORD))
    salvo = [str(Path(sys.executable).with_name("salvo"))]
    proc = subprocess.Popen(
        [*salvo, "replay", str(path), "--no-browser"], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "/replay" in line, line
        url = next(w for w in line.split() if w.startswith("http://"))
        assert json.loads(urllib.request.urlopen(url.removesuffix("replay") + "record", timeout=5).read()) == RECORD
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_replay_refuses_a_file_without_a_record(tmp_path: Path) -> None:
    path = tmp_path / "nothing.json"
    path.write_text('{"hello": 1}')
    result = CliRunner().invoke(main, ["replay", str(path), "--no-browser"])
    assert result.exit_code == ExitCode.LOCAL_FILE and "no game record" in result.output
    result = CliRunner().invoke(main, ["replay", str(tmp_path / "missing.json"), "--no-browser"])
    assert result.exit_code == ExitCode.LOCAL_FILE
