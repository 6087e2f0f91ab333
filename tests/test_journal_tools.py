"""The journal after the night: what every game came to (``journaltools.summarize``,
``salvo journal list``), and a replay that reports a game's result, not the
lobby its reset opened. Journals are made by playing games through the
engine, journaled as the referee does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from nacl.public import PrivateKey

from salvo.arena.journal import Store
from salvo.arena.resume import make_arenas
from salvo.cli import ExitCode, main
from salvo.game.events import Abandon, CloseLobby, Phase
from salvo.organiser.journaltools import GameSummary, JournalError, find_game, games, heard_so_far, summarize
from test_store import CONFIG, RecordingDriver, recording

from kit import COLUMNS, ROWS, all_cells


def published(d: RecordingDriver) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The stats summary and each player's stats the engine holds retained now."""
    g, t = d.game, d.game.topics
    return json.loads(g.retained[t.stats_summary]), {n: json.loads(g.retained[t.stats_player(n)]) for n in g.order}


def win(d: RecordingDriver) -> str:
    """Play a started game until the first player sinks the other's fleet; the winner."""
    winner = d.cur
    loser = next(n for n in d.game.order if n != winner)
    d.wear_down(loser, all_cells(d.fleets[loser]), winner)
    assert d.game.phase is Phase.OVER
    return winner


def night(tmp_path: Path) -> tuple[Store, RecordingDriver, dict[str, Any]]:
    """Arena "p": game 1 won and reset, game 2 abandoned mid-game, game 3 a
    lobby closed, game 4 in progress. What was published and when, by game."""
    store, _key, d = recording(tmp_path, "p", 9)
    seen: dict[str, Any] = {"ids": {1: d.game.game_id}, "started": d.now}
    d.join("alice", "bob")
    d.now += 30  # placing takes a while
    d.place("alice", ROWS)
    d.place("bob", COLUMNS)
    d.now += 5
    seen["winner"] = win(d)
    seen["over_at"] = d.now
    seen["order"] = list(d.game.order)
    seen["summary"], seen["stats"] = published(d)
    d.tick(101)  # reset_after: the lobby of game 2 opens (journaled as game 1's last event)
    assert d.game.game_no == 2 and d.game.phase is Phase.LOBBY
    seen["ids"][2] = d.game.game_id
    d.now += 500
    d.start({"carol": ROWS, "dave": COLUMNS})
    d.idle_turn()
    seen["abandoned_at"], seen["abandoned_turn"] = d.now, d.game.turn
    d.ok(Abandon("salvo referee --fresh", d.now))
    seen["ids"][3] = d.game.game_id
    d.join("erin")
    d.ok(CloseLobby("no-show: frank", d.now))
    seen["ids"][4] = d.game.game_id
    d.start({"gina": ROWS, "hal": COLUMNS})
    d.idle_turn()
    d.idle_turn()
    seen["turn"] = d.game.turn
    seen["shots"] = {n: d.game.players[n].shots for n in d.game.order}
    return store, d, seen


def test_a_finished_game_sums_up_as_the_engine_published_it(tmp_path: Path) -> None:
    store, _d, seen = night(tmp_path)
    s = summarize(store, "p", 1)
    assert s.over and s.termination == "victory" == seen["summary"]["termination"]
    assert s.winner == seen["winner"] == seen["summary"]["winner"]
    assert s.turns == seen["summary"]["turns"]
    assert s.stats == seen["stats"]  # shots, hits, place, ships sunk: exactly as published
    assert {n: (p["shots"], p["hits"]) for n, p in s.stats.items()} == {
        n: (p["shots"], p["hits"]) for n, p in seen["stats"].items()
    }
    assert list(s.players) == seen["order"] and s.game_id == seen["ids"][1]
    assert s.started == seen["started"] and s.ended == seen["over_at"]
    assert s.duration_s == pytest.approx(35.0) == seen["over_at"] - seen["started"]
    assert s.rejected == 0
    json.dumps(s.as_json())  # JSON as it is
    store.close()


def test_games_that_ended_without_a_result_or_have_not_ended(tmp_path: Path) -> None:
    store, d, seen = night(tmp_path)
    abandoned, closed, running = (summarize(store, "p", n) for n in (2, 3, 4))
    assert abandoned.termination == "abandoned" and abandoned.over and abandoned.winner is None
    assert abandoned.ended == seen["abandoned_at"] and abandoned.turns == seen["abandoned_turn"]
    assert set(abandoned.players) == {"carol", "dave"} and abandoned.stats["carol"]["place"] is None
    assert closed.termination == "lobby closed" and closed.over and closed.players == ("erin",)
    assert closed.turns == 0 and closed.stats == {}
    assert running.termination == "in progress" and not running.over and running.ended is None
    assert running.turns == seen["turn"] and running.winner is None
    assert {n: p["shots"] for n, p in running.stats.items()} == seen["shots"]
    assert d.game.game_no == 4
    store.close()


def test_every_game_of_an_arena_and_the_game_of_an_id(tmp_path: Path) -> None:
    store, _d, seen = night(tmp_path)
    every = games(store, "p")
    assert [s.game_no for s in every] == [1, 2, 3, 4]
    assert [s.termination for s in every] == ["victory", "abandoned", "lobby closed", "in progress"]
    assert [s.game_id for s in every] == [seen["ids"][n] for n in (1, 2, 3, 4)]
    assert every[0] == summarize(store, "p", 1)
    assert games(store, "nowhere") == []
    with pytest.raises(JournalError, match="no game 9"):
        summarize(store, "p", 9)
    for number, game_id in seen["ids"].items():
        assert find_game(store, game_id) == ("p", number)
        assert find_game(store, game_id, "p") == ("p", number)  # the director's: one arena
        assert find_game(store, game_id, "elsewhere") is None
    assert find_game(store, "0123456789abcdef") is None
    store.close()
    # A reader beside no referee finds the same.
    reader = Store(store.path, writer=False)
    assert games(reader, "p") == every
    reader.close()


def test_a_lobby_that_has_not_started_yet(tmp_path: Path) -> None:
    store, _key, d = recording(tmp_path, "q", 3)
    d.join("ada", "bob")
    s = summarize(store, "q", 1)
    assert (s.termination, s.over, s.turns, s.players) == ("lobby", False, 0, ("ada", "bob"))
    store.close()


# -- the command line -------------------------------------------------------------------------


def test_a_replay_shows_the_games_result_not_the_lobby_its_reset_opened(tmp_path: Path) -> None:
    store, _d, seen = night(tmp_path)
    store.close()
    out = tmp_path / "game1.jsonl"
    exported = CliRunner().invoke(main, ["journal", "export", str(out), "--state", str(store.path), "--arena", "p"])
    assert exported.exit_code == 0, exported.output
    for number, says in (
        (1, f"state over, {seen['summary']['turns']} turns, winner {seen['winner']} (victory)"),
        (2, f"state turn, {seen['abandoned_turn']} turns, winner - (abandoned)"),
    ):
        args = ["journal", "export", str(out), "--state", str(store.path), "--arena", "p", "--game", str(number)]
        assert CliRunner().invoke(main, args).exit_code == 0
        assert json.loads(out.read_text().splitlines()[-1])["type"] in ("tick", "abandon")  # the reset is exported
        replay = CliRunner().invoke(main, ["journal", "replay", str(out)])
        assert replay.exit_code == 0, replay.output
        assert "0 rejected" in replay.output and says in replay.output, replay.output
    assert '"termination":"victory"' not in replay.output  # game 2 has no stats


def test_journal_list_while_a_referee_holds_the_file(tmp_path: Path) -> None:
    store, _d, seen = night(tmp_path)  # the writer stays open: a referee running on it
    (arena,) = make_arenas(["q"], CONFIG, 4, PrivateKey.generate(), store)
    RecordingDriver(store, arena, "q").join("zoe")  # a second arena: a lobby
    state = str(store.path)
    listed = CliRunner().invoke(main, ["journal", "list", "--state", state])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[0].split() == ["ARENA", "GAME", "ID", "STARTED", "LASTED", "TURNS", "WINNER", "END", "PLAYERS"]
    assert len(lines) == 6 and lines[5].split()[:2] == ["q", "1"] and "zoe" in lines[5]
    for line, number, end in zip(
        lines[1:5], (1, 2, 3, 4), ("victory", "abandoned", "lobby closed", "in progress"), strict=True
    ):
        assert line.split()[:3] == ["p", str(number), seen["ids"][number][:8]]
        assert end in line
    assert f" {seen['winner']} " in lines[1] and lines[1].endswith(",".join(seen["order"]))
    as_json = CliRunner().invoke(main, ["journal", "list", "--state", state, "--arena", "p", "--json"])
    assert as_json.exit_code == 0, as_json.output
    rows = [json.loads(line) for line in as_json.output.splitlines()]
    assert rows == [s.as_json() for s in games(store, "p")]
    assert rows[0]["winner"] == seen["winner"] and rows[3]["over"] is False
    assert GameSummary(**{**rows[0], "players": tuple(rows[0]["players"])}) == summarize(store, "p", 1)
    nothing = CliRunner().invoke(main, ["journal", "list", "--state", state, "--arena", "elsewhere"])
    assert nothing.exit_code == 0 and "no games of arena elsewhere" in nothing.output
    store.close()


@pytest.mark.parametrize("command", ["list", "export"])
def test_a_damaged_or_missing_state_file_is_one_clear_line(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all, just text")
    args = ["journal", command, *(["-"] if command == "export" else []), "--state"]
    damaged = CliRunner().invoke(main, [*args, str(bad)])
    assert damaged.exit_code == ExitCode.LOCAL_FILE, damaged.output
    assert "is not an SQLite database" in damaged.output and "Traceback" not in damaged.output
    missing = CliRunner().invoke(main, [*args, str(tmp_path / "none.db")])
    assert missing.exit_code == ExitCode.USAGE and "does not exist" in missing.output
    assert not (tmp_path / "none.db").exists()


def test_the_salvos_and_sinks_heard_so_far_are_the_ones_published(tmp_path: Path) -> None:
    """What a spectator that watched the game from its start heard of its
    salvos and sinks (the broker retains the last salvo only), from the
    journal alone: the very publishes, in order; none once the arena is
    back in its lobby."""
    store, _key, d = recording(tmp_path, "p", 9)
    t = d.game.topics

    def as_published() -> list[tuple[str, str]]:
        since = max((i for i, p in enumerate(d.published) if p.topic == t.state and p.payload == "lobby"), default=0)
        kept = [
            p for p in d.published[since:] if p.topic == t.salvo or (p.topic.endswith("/sunk") and p.payload == "true")
        ]
        return [(p.topic, p.payload) for p in kept]

    d.start({"alice": ROWS, "bob": COLUMNS})
    d.idle_turn()
    shooter = d.cur
    target = next(n for n in d.game.order if n != shooter)
    d.wear_down(target, all_cells(d.fleets[target])[:6], shooter)  # the carrier (5 cells) sinks
    mid = heard_so_far(store, ["p", "nowhere"])
    assert mid == as_published() and len(mid) > 3
    assert [x for x in mid if x[0].endswith("/sunk")] == [(t.sunk(target, "carrier"), "true")]
    win(d)
    assert heard_so_far(store, ["p"]) == as_published()
    d.tick(101)  # the reset: the next game has heard nothing yet
    assert heard_so_far(store, ["p"]) == []
