"""The projector page as the room sees it, in real headless Chromium at
1920x1080: an arena's headline (both teams, the round), the live turn and its
countdown (and PAUSED), salvo results counted live, sinks as they happen,
the finished game replayed on boards, nothing of a game left after its
reset, and the champion when the tournament is done; a big night's arenas
and standings paged to fit the screen, deadlines counted on the server's
clock, and a page opened mid-game counting the whole game. The topics are
published here as the referee and the director would (retained where they
retain), or fed to the server's Hub directly, so every step is known;
tests/test_spectate.py follows a real referee. Screenshots of each screen go to build/screenshots/, or with
SALVO_DOC_SCREENSHOTS=1 to docs/screenshots/ (the ones the guide shows)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import test_spectate
from salvo.web.spectate import Hub, SpectatorServer
from test_replay_viewer import DOCS_SHOTS, full_hd, make_record

from chromium import SHOTS
from mqttkit import Recorder

broker, serve, tidy, browser = test_spectate.broker, test_spectate.serve, test_spectate.tidy, test_spectate.browser
_text, _until = test_spectate._text, test_spectate._until

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
    return full_hd(browser)


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

    # The only arena on the screen shows every salvo so far, by hits.
    assert [_text(projector, f'{card} .salvo-row[data-player="{n}"]').split() for n in ("alice", "bob")] == [
        ["alice", "5"],
        ["bob", "1"],
    ]

    # Readable from the back of the room: key text at 32 px or more.
    for selector in (
        f"{card} .headline",
        f"{card} [data-testid=turn]",
        f"{card} .countdown",
        f"{card} [data-testid=salvo]",
        f"{card} tbody td",
        f"{card} .salvo-row .hits",
        "#standings tbody td",
        "#round",
    ):
        assert _px(projector, selector) >= 32, selector
    # The only arena on the screen takes it: bigger still, with more of its story.
    assert _px(projector, f"{card}.solo .headline") >= 64
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

    # The reset: the players and the events are the next game's; the last
    # game's replay plays on, saying whose it is, until the next first turn.
    for topic in ("game/record", "game/winner", "game/salvo", "game/turn", "players/bob/ships/carrier/sunk"):
        w.publish(f"{p}/{topic}", "", retain=True)
    w.publish(f"{p}/game/state", "lobby", retain=True)
    w.publish(f"{p}/players/list", '["carol"]', retain=True)
    _until(projector, "the next lobby", lambda: "Lobby: 1 player joined" in _text(projector, card))
    listed = f"return [...document.querySelectorAll('{card} tbody tr')].map((r) => r.dataset.player);"
    assert projector.execute_script(listed) == ["carol"]
    assert _text(projector, f"{card} .feed") == ""
    assert _text(projector, f"{card} .replay .salvo-line").startswith("Replay · alice vs bob · ")
    w.publish(f"{p}/players/list", '["carol","dave"]', retain=True)
    w.publish(f"{p}/game/state", "turn", retain=True)
    _until(projector, "the next game, live", lambda: projector.execute_script(REPLAY_AT, card) is None)
    text = _text(projector, card)
    assert "carol vs dave" in text and "alice" not in text and "bob" not in text, text

    # The tournament is done: its champion, not stopped referees.
    w.publish(f"{p}/game/server", "down", retain=True)
    done = {**STANDINGS, "done": True, "games_played": 6}
    done["table"] = [_row("carol", 3, 3, 0, 6, 4), _row("alice", 3, 2, 1, 4, 6), _row("bob", 3, 1, 2, 2, 8)]
    w.publish("/tournament/standings", json.dumps(done), retain=True)
    _until(projector, "the champion", lambda: _text(projector, "#champion [data-testid=champion-team]") == "carol")
    assert projector.find_element("id", "champion").is_displayed()
    assert "2. alice" in _text(projector, "#champion") and _px(projector, "#champion .team") >= 32
    projector.save_screenshot(str(DOCS_SHOTS / "projector-champion.png"))


def test_the_champion_goes_when_the_tournament_topics_are_cleared(
    serve: Callable[..., SpectatorServer], tournament: Recorder, prefix: str, projector: Any
) -> None:
    """Back to free play after the tournament: the organiser clears the
    standings and the schedule (empty retained messages). The server forgets
    them and the open page drops the champion and shows the arenas again."""
    w, card = tournament, f'article[data-arena="{prefix}"]'
    server = serve()
    w.publish(f"/{prefix}/game/state", "over", retain=True)
    w.publish(f"/{prefix}/players/list", '["alice","bob"]', retain=True)
    w.publish("/tournament/schedule", json.dumps(SCHEDULE), retain=True)
    w.publish("/tournament/standings", json.dumps({**STANDINGS, "done": True}), retain=True)
    projector.get(server.url)
    _until(projector, "the champion", lambda: _text(projector, "#champion [data-testid=champion-team]") == "alice")
    assert _text(projector, "#round") == "Round 2"
    for topic in ("/tournament/standings", "/tournament/schedule"):
        w.publish(topic, "", retain=True)
    _until(projector, "the champion gone", lambda: not projector.find_element("id", "champion").is_displayed())
    _until(projector, "the standings gone", lambda: "No tournament running." in _text(projector, "#standings"))
    assert _text(projector, "#round") == "" and projector.find_element("css selector", card).is_displayed()
    assert not {"/tournament/standings", "/tournament/schedule"} & set(server.hub.snapshot())
    w.publish(f"/{prefix}/game/state", "lobby", retain=True)  # free play: the arena's next game
    _until(projector, "the arena's lobby", lambda: "Lobby:" in _text(projector, card))
    projector.get(server.url)  # a page opened now never sees the tournament
    _until(projector, "the arena, reloaded", lambda: "Lobby:" in _text(projector, card))
    assert not projector.find_element("id", "champion").is_displayed() and _text(projector, "#round") == ""


@pytest.fixture
def fed() -> Iterator[Callable[[Hub], SpectatorServer]]:
    """``fed(hub)``: a spectator server without a broker, fed through ``hub``."""

    def start(spectator: Callable[..., SpectatorServer], hub: Hub) -> SpectatorServer:
        hub.connected()  # the page says "live"
        return spectator(hub=hub)

    with test_spectate.spectator_servers() as spectator:
        yield lambda hub: start(spectator, hub)


def _publish(hub: Hub, arena: str, topics: dict[str, Any]) -> None:
    """Retained messages as the referee publishes them (dicts and lists as JSON)."""
    for topic, payload in topics.items():
        text = payload if isinstance(payload, str) else json.dumps(payload)
        hub.message(f"/{arena}/{topic}", text.encode(), retained=True)


def _split(sink: str) -> tuple[str, str]:
    owner, _, ship = sink.partition("/")
    return owner, ship


def _left(text: str) -> int | None:
    """The seconds a countdown shows: "25s" or "1:29"."""
    minutes, _, seconds = text.rpartition(":")
    if not minutes:
        return _seconds(text)
    return int(minutes) * 60 + int(seconds) if minutes.isdigit() and seconds.isdigit() else None


def test_countdowns_run_on_the_servers_clock(fed: Callable[[Hub], SpectatorServer], projector: Any) -> None:
    ahead = [3600.0]  # the server's clock, an hour ahead of this machine's
    hub = Hub(clock=lambda: time.time() + ahead[0])
    server = fed(hub)
    server.projector.heartbeat_s = 0.3  # idle streams get the server's clock this often
    at = round(hub.clock() + 30, 3)
    _publish(hub, "arena1", {"game/state": "turn", "players/list": ["alice", "bob"], "game/current": "alice"})
    _publish(hub, "arena1", {"game/turn": {"turn": 1, "player": "alice", "shots": 5}})
    _publish(hub, "arena1", {"game/deadline": {"phase": "turn", "at": at}})
    projector.get(server.url)
    countdown = 'article[data-arena="arena1"] .countdown'
    # 30 s on the server's clock: not 3630 s (this machine's clock), not 0.
    _until(projector, "about 30 s left", lambda: 25 <= (_left(_text(projector, countdown)) or -1) <= 30)
    ahead[0] -= 60  # the server's clock is set back a minute: its clock events say so
    _until(projector, "about 90 s left", lambda: 80 <= (_left(_text(projector, countdown)) or -1) <= 90)


def test_a_page_opened_mid_game_counts_the_whole_game(fed: Callable[[Hub], SpectatorServer], projector: Any) -> None:
    hub = Hub()
    server = fed(hub)
    _publish(hub, "arena1", {"game/state": "lobby", "players/list": []})
    _publish(hub, "arena1", {"players/list": ["alice", "bob", "carol"], "game/state": "turn"})
    salvos: list[tuple[str, int, int, list[str]]] = [  # player, shots, hits, ships sunk: owner/ship
        ("alice", 5, 2, ["bob/patrolboat"]),
        ("bob", 5, 1, []),
        ("carol", 5, 4, ["alice/carrier", "bob/destroyer"]),
        ("alice", 4, 2, []),
        ("bob", 4, 0, []),
    ]
    for turn, (player, shots, hits, sunk) in enumerate(salvos, 1):
        _publish(hub, "arena1", {"game/salvo": {"turn": turn, "player": player, "shots": shots, "hits": hits}})
        # The sinks follow the salvo that sank them (docs/protocol.md section 6).
        _publish(hub, "arena1", {f"players/{owner}/ships/{ship}/sunk": "true" for owner, ship in map(_split, sunk)})
    card = 'article[data-arena="arena1"]'

    def row(name: str) -> list[str]:  # ships left, ships sunk by this player, shots, hits
        return _text(projector, f'{card} tr[data-player="{name}"]').split()[1:]

    expected = {"alice": ["4", "1", "9", "4"], "bob": ["3", "0", "9", "1"], "carol": ["5", "2", "5", "4"]}
    for _ in ("opened", "reloaded"):
        projector.get(server.url)
        _until(projector, "the whole game counted", lambda: {n: row(n) for n in expected} == expected)
    _publish(hub, "arena1", {"game/salvo": {"turn": 6, "player": "carol", "shots": 3, "hits": 1}})
    _until(projector, "the next salvo counted on", lambda: row("carol") == ["5", "2", "8", "5"])


def _live(hub: Hub, arena: str, players: list[str], turn: int) -> None:
    """An arena in the middle of a game."""
    shooter = players[turn % len(players)]
    _publish(hub, arena, {"game/state": "turn", "players/list": players, "game/current": shooter})
    _publish(hub, arena, {"game/turn": {"turn": turn, "player": shooter, "shots": 5}})
    _publish(hub, arena, {"game/deadline": {"phase": "turn", "at": round(time.time() + 60, 3)}})
    last = players[(turn - 1) % len(players)]
    _publish(hub, arena, {"game/salvo": {"turn": turn - 1, "player": last, "shots": 5, "hits": 2}})


def _over(hub: Hub, arena: str, game: str) -> None:
    """An arena whose game is over: its record is replayed."""
    record = make_record(game)
    _publish(hub, arena, {"game/state": "turn", "players/list": record["players"], "game/winner": record["winner"]})
    _publish(hub, arena, {"game/deadline": {"phase": "reset", "at": round(time.time() + 300, 3)}})
    _publish(hub, arena, {"game/state": "over", "game/record": record})


PAGE = """
const box = document.getElementById('arenas').getBoundingClientRect();
const rows = document.getElementById('standings-rows').getBoundingClientRect();
const inside = (sel, r) => [...document.querySelectorAll(sel)].every((e) => {
  const b = e.getBoundingClientRect(); return b.top >= r.top - 1 && b.bottom <= r.bottom + 1; });
const pager = (id) => { const e = document.getElementById(id); return e.hidden ? '' : e.innerText; };
return {arenas: [...document.querySelectorAll('article[data-arena]')].map((a) => a.dataset.arena),
        teams: [...document.querySelectorAll('#standings tbody tr')].map((r) => r.innerText.split('\\t')[1]),
        arenaPager: pager('arena-pager'), standingsPager: pager('standings-pager'),
        fits: inside('article[data-arena]', box) && inside('#standings tbody tr', rows)
              && box.bottom <= innerHeight && rows.bottom <= innerHeight
              && document.scrollingElement.scrollHeight <= innerHeight};
"""


def test_a_big_night_is_paged_to_fit_the_screen(fed: Callable[[Hub], SpectatorServer], projector: Any) -> None:
    hub = Hub()
    server = fed(hub)
    # Seven arenas: four games under way (one of three players), two replays, a lobby.
    _publish(hub, "arena1", {"game/state": "lobby", "players/list": ["zoe"]})
    for arena, players in (("arena2", ["ann", "ben"]), ("arena4", ["cat", "dan", "eve"])):
        _live(hub, arena, players, 7)
    for arena, players in (("arena5", ["fay", "gus"]), ("arena7", ["hal", "ida"])):
        _live(hub, arena, players, 3)
    _over(hub, "arena3", "g-3")
    _over(hub, "arena6", "g-6")
    teams = [f"team-{i:02}" for i in range(1, 31)]
    table = [_row(t, 3, 3 - i // 10, i // 10, 6 - 2 * (i // 10), 30 - i) for i, t in enumerate(teams)]
    hub.message("/tournament/standings", json.dumps({**STANDINGS, "table": table}).encode(), retained=True)
    projector.get(server.url + "?page_s=0.8")

    arena_pages: dict[str, list[str]] = {}  # what each page showed, by what its pager said
    team_pages: dict[str, list[str]] = {}
    misfits: list[str] = []

    def first(pager: str) -> int:  # where a page starts, by what its pager says
        return int(pager.removeprefix("arenas ").removeprefix("arena ").split()[0].split("–")[0])

    def look() -> bool:
        page = projector.execute_script(PAGE)
        if page["arenaPager"] and page["standingsPager"]:  # both paged: the whole stream is in
            if not page["fits"]:
                misfits.append(f"{page['arenaPager']} / {page['standingsPager']}")
            arena_pages.setdefault(page["arenaPager"], page["arenas"])
            team_pages.setdefault(page["standingsPager"], page["teams"])
        arenas = sorted(a for v in arena_pages.values() for a in v)
        return (
            arenas == [f"arena{i}" for i in range(1, 8)] and sorted(t for v in team_pages.values() for t in v) == teams
        )

    _until(projector, "every arena and every team, a page at a time", look, 15)
    assert not misfits, misfits
    # Each page says which it is; together they show the arenas (games under
    # way first) and the standings in order, each once.
    pagers = sorted(arena_pages, key=first)
    assert first(pagers[0]) == 1 and all(k.endswith(" of 7") for k in pagers), pagers
    order = [a for k in pagers for a in arena_pages[k]]
    assert order == ["arena2", "arena4", "arena5", "arena7", "arena3", "arena6", "arena1"], order
    pagers = sorted(team_pages, key=first)
    assert pagers[0].startswith("1–") and all(k.endswith(" of 30") for k in pagers), pagers
    assert [t for k in pagers for t in team_pages[k]] == teams
    for selector in ("[data-testid=arena-pager]", "[data-testid=standings-pager]", ".headline", "tbody td"):
        assert _px(projector, selector) >= 32, selector
    SHOTS.mkdir(parents=True, exist_ok=True)
    projector.save_screenshot(str(SHOTS / "projector-paged.png"))


def test_two_arenas_keep_their_story_and_a_replay_plays_on_in_the_lobby(
    fed: Callable[[Hub], SpectatorServer], projector: Any
) -> None:
    hub = Hub()
    server = fed(hub)
    # The schedule has moved on to round 3 while arena2 still replays its
    # round-1 game: the label is that game's, not a round-3 one sharing a team.
    schedule = {
        "round": 3,
        "games": [["alice", "dave"], ["bob", "carol"]],
        "fixtures": [
            {"round": 1, "teams": ["alice", "bob"], "done": True},
            {"round": 2, "teams": ["carol", "dave"], "done": False},
            {"round": 3, "teams": ["alice", "dave"], "done": False},
        ],
    }
    hub.message("/tournament/schedule", json.dumps(schedule).encode(), retained=True)
    _live(hub, "arena1", ["carol", "dave"], 4)
    for turn in (1, 2):
        salvo = {"turn": turn, "player": "carol" if turn % 2 else "dave", "shots": 5, "hits": turn}
        _publish(hub, "arena1", {"game/salvo": salvo})
    _over(hub, "arena2", "g-early")  # alice vs bob
    projector.get(server.url)
    one, two = 'article[data-arena="arena1"]', 'article[data-arena="arena2"]'
    _until(projector, "both arenas", lambda: "carol vs dave" in _text(projector, f"{one} .headline"))
    assert _text(projector, f"{one} .arena-top").split()[-2:] == ["round", "2"]
    _until(projector, "arena2's replay", lambda: "alice vs bob" in _text(projector, f"{two} .headline"))
    assert _text(projector, f"{two} .arena-top").split()[-2:] == ["round", "1"]
    # Two arenas: each live card keeps its recent events and its salvo rows.
    assert projector.find_element("css selector", f"{one} ul.feed").is_displayed()
    assert _text(projector, f'{one} .salvo-row[data-player="dave"]').split() == ["dave", "2", "2"]
    page = projector.execute_script(PAGE)
    assert page["fits"] and not page["arenaPager"], page
    for selector in (f"{one} .arena-top", f"{one} .badge", f"{one} ul.feed li", f"{two} .board-name"):
        assert _px(projector, selector) >= 32, selector
    SHOTS.mkdir(parents=True, exist_ok=True)
    projector.save_screenshot(str(SHOTS / "projector-two-arenas.png"))

    # arena2 is reset for its next game: the replay plays on through the lobby...
    _publish(hub, "arena2", {"game/record": "", "game/winner": "", "game/state": "lobby", "players/list": ["alice"]})
    _until(projector, "the lobby", lambda: _text(projector, f"{two} [data-testid=state]") == "LOBBY")
    _until(projector, "the replay moving on", lambda: int(projector.execute_script(REPLAY_AT, two) or 0) > 1, 15)
    assert "REPLAY" in _text(projector, f"{two} .arena-top")
    assert _text(projector, f"{two} .headline") == "alice vs dave"  # the arena's next match, round 3
    assert _text(projector, f"{two} .replay .salvo-line").startswith("Replay · alice vs bob · ")
    # ... until the next game's first turn.
    _publish(hub, "arena2", {"players/list": ["alice", "dave"], "game/state": "turn"})
    _until(projector, "the live game", lambda: projector.execute_script(REPLAY_AT, two) is None)
    assert _text(projector, f"{two} .headline") == "alice vs dave"


# The salvo a card's replay shows, null without a replay.
REPLAY_AT = "const r = document.querySelector(arguments[0] + ' [data-testid=replay]'); return r && r.dataset.salvo;"
