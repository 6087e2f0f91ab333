"""The organiser's controls and the CLI's request spool applied to a real
director (on the project's broker) with a stand-in referee: refusals change
nothing, a damaged request is answered and the night goes on, nothing is
applied twice across a restart."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from salvo.net.loop import Loop
from salvo.net.mqtt import Broker
from salvo.net.watch import wait_until
from salvo.organiser.tournament import actions, spool, steps
from salvo.organiser.tournament.controls import ControlError
from salvo.organiser.tournament.director import TICK_S, Director
from salvo.organiser.tournament.scoring import GameResult
from salvo.organiser.tournament.state import Live, State
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, game_over
from mosquitto import Mosquitto


class StandIn:
    """The referee's controls, always obliging, remembered."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def close_lobby(self, prefix: str, reason: str) -> bool:
        self.calls.append(("close_lobby", prefix))
        return True

    def abort_game(self, prefix: str, reason: str) -> bool:
        self.calls.append(("abort_game", prefix))
        return True

    def extend(self, prefix: str, seconds: float) -> bool:
        self.calls.append(("extend", prefix))
        return True

    def pause_game(self, prefix: str, reason: str) -> bool:
        self.calls.append(("pause_game", prefix))
        return True

    def resume_game(self, prefix: str) -> bool:
        self.calls.append(("resume_game", prefix))
        return True

    def seat(self, prefix: str, players: int) -> bool:
        return True

    def arenas_up(self) -> dict[str, bool]:
        return {}

    def any_stopped(self) -> bool:
        return False


def director(broker: Mosquitto, tmp_path: Path, state: State, prefix: str, loop: Loop | None = None) -> Director:
    d = Director(
        broker=Broker.from_url(broker.url("referee")),
        arenas=[prefix],
        state=state,
        state_path=tmp_path / "t.json",
        roster={prefix: set()},
        referee=StandIn(),
        loop=loop,
    )
    d.save()
    return d


def test_a_damaged_request_is_answered_and_a_done_one_is_not_applied_again(
    broker: Mosquitto, tmp_path: Path, prefix: str
) -> None:
    state = State("round-robin", 3, ["a", "b", "c", "d"])
    state.draw()
    state.results.append(GameResult(1, prefix, ["a", "d"], "a", {}, fixture=0))
    d = director(broker, tmp_path, state, prefix)
    try:
        requests, replies = spool.paths(d.state_path)
        lines = [
            '{"id":"r1","action":"void-game","args":{"game":1e400}}',  # no CLI sends it; a damaged file may
            "not json at all",
            json.dumps({"id": "r2", "action": "extra-time", "args": {"arena": prefix, "seconds": "nan"}}),
            '{"id":"r3","action":"pause","args":{}}',
        ]
        requests.write_text("\n".join(lines) + "\n")
        steps.now(d.spool.serve(d))
        answers = {r["id"]: r for r in map(json.loads, replies.read_text().splitlines())}
        assert (answers["r1"]["ok"], answers["r1"]["code"]) == (False, "bad_arguments")
        assert answers["r2"]["ok"] is False and answers["r3"]["ok"] is True
        assert d.state.paused and [a["action"] for a in d.state.audit] == ["pause"]
    finally:
        d.close()
    # A restart after the state was saved but before the reply was written:
    # the audit knows the request, it is not applied again.
    replies.unlink()
    again = director(broker, tmp_path, State.load(tmp_path / "t.json") or state, prefix)
    try:
        again.state.paused = False
        steps.now(again.spool.serve(again))
        assert not again.state.paused and len(again.state.audit) == 1
    finally:
        again.close()


def test_an_arena_held_by_players_no_fixture_put_there_is_cleared(
    broker: Mosquitto, tmp_path: Path, prefix: str
) -> None:
    """A lobby with players in an arena no fixture holds (a join that got in
    around a no-show, in the review): the director never assigned that arena
    again. Now it sends them away, at most every INTRUDERS_EVERY_S, and the
    organiser can clear any arena, live or not (clear-arena)."""
    state = State("round-robin", 3, ["a", "b", "c", "d"])
    state.draw()
    state.paused = True  # nothing is assigned: the arena stays without a fixture
    d = director(broker, tmp_path, state, prefix)
    referee: Any = d.referee
    try:
        with pytest.raises(ControlError) as nothing:  # an idle arena: nothing to clear
            actions.apply(d, "clear-arena", {"arena": prefix, "reason": "tidy"}, "test")
        assert nothing.value.code == "nothing_to_clear" and referee.calls == []
        t = Topics(prefix)
        d.rec.publish(t.state, "lobby", retain=True)
        d.rec.publish(t.players_list, '["mallory"]', retain=True)
        d.rec.wait(lambda m: m.topic == t.players_list and m.payload == b'["mallory"]', timeout=10)
        d.state.paused = False
        steps.now(d._assign())
        steps.now(d._assign())  # once, not at every step
        assert referee.calls == [("close_lobby", prefix)]
        assert prefix not in d.state.live  # assigned only once the lobby is empty again
        entry = actions.apply(d, "clear-arena", {"arena": prefix, "reason": "tidy"}, "test")
        assert entry["result"] == "cleared: an empty lobby" and referee.calls[-1] == ("close_lobby", prefix)
    finally:
        d.close()


def test_a_team_registered_a_moment_ago_can_be_admitted_at_once(broker: Mosquitto, tmp_path: Path, prefix: str) -> None:
    """`teams add eve` then `tournament admit-late eve` straight away (the
    guide's late-team lines pasted at once): the director has not looked at
    the registry since, and must before it judges the control."""
    registered = ["a", "b", "c"]
    state = State("round-robin", 3, ["a", "b", "c"])
    state.draw()
    d = director(broker, tmp_path, state, prefix)
    d.registered = lambda: list(registered)
    try:
        d.check_registry()  # the director's regular look: nobody late
        registered.append("eve")  # the registry has eve now; the next regular look is seconds away
        assert actions.apply(d, "admit-late", {"team": "eve"}, "test")["result"] == "admitted"
        assert d.state.late == {"eve": "admitted"}
        with pytest.raises(ControlError) as unknown:
            actions.apply(d, "admit-late", {"team": "zed"}, "test")
        assert unknown.value.code == "not_late"
    finally:
        d.close()


def test_a_forfeit_against_a_withdrawn_team_cannot_be_voided(broker: Mosquitto, tmp_path: Path, prefix: str) -> None:
    state = State("round-robin", 3, ["a", "b", "c", "d"])
    state.draw()
    d = director(broker, tmp_path, state, prefix)
    try:
        actions.apply(d, "withdraw", {"team": "d", "reason": "gone"}, "test")
        forfeits = [i for i, r in enumerate(d.state.results) if r.forfeited == ["d"]]
        assert len(forfeits) == 3 and d.state.pending() == [
            i for i, f in enumerate(d.state.fixtures) if "d" not in f.teams
        ]
        before = json.dumps(d.status(), sort_keys=True)
        with pytest.raises(ControlError) as refused:
            actions.apply(d, "void-game", {"game": forfeits[0], "reason": "?"}, "test")
        assert refused.value.code == "withdrawn"
        with pytest.raises(ControlError) as again:
            actions.apply(d, "withdraw", {"team": "d"}, "test")
        assert again.value.code == "withdrawn"
        assert json.dumps(d.status(), sort_keys=True) == before  # refused: nothing changed
    finally:
        d.close()


def test_withdrawing_from_a_live_table_replays_it_without_the_team(
    broker: Mosquitto, tmp_path: Path, prefix: str
) -> None:
    state = State("swiss", 1, ["a", "b", "c", "d"], table_size=4)
    state.draw()
    state.live[prefix] = Live(0, prefix, 0.0, game_id="g1")
    d = director(broker, tmp_path, state, prefix)
    try:
        entry: dict[str, Any] = actions.apply(d, "withdraw", {"team": "b", "reason": "ill"}, "test")
        assert entry["action"] == "withdraw"
        assert d.referee is not None and ("abort_game", prefix) in d.referee.calls  # type: ignore[attr-defined]
        assert d.state.fixtures[0].teams == ["a", "c", "d"] and d.state.pending() == [0]  # played again, without b
        (forfeit,) = d.state.results
        assert forfeit.forfeited == ["b"] and forfeit.fixture == -1 and forfeit.counts
    finally:
        d.close()


def test_a_late_team_never_makes_a_table_bigger_than_the_table_size() -> None:
    state = State("round-robin", 3, [f"t{i}" for i in range(8)], table_size=4)
    state.draw()
    state.admit_late("late")
    assert max(len(f.teams) for f in state.fixtures) == 4
    small = State("round-robin", 3, [f"t{i}" for i in range(7)], table_size=4)
    small.draw()
    small.admit_late("late")
    assert max(len(f.teams) for f in small.fixtures) == 4 and any("late" in f.teams for f in small.fixtures)


def test_a_finished_games_assignments_are_cleared_while_paused(broker: Mosquitto, tmp_path: Path, prefix: str) -> None:
    """Paused, no next game replaces a finished game's assignments: they are
    emptied all the same, so no team reads a game that is over as its next."""
    from salvo.net.watch import Recorder
    from salvo.spec.topics import Topics, TournamentTopics

    names = [f"{prefix}-{t}" for t in "abc"]  # the assignment topics are the session broker's, not the arena's
    # Three teams: a game is left after this one (the last one's "done" would follow the standings at once).
    state = State("round-robin", 3, names)
    state.draw()
    a, b = state.fixtures[0].teams
    state.paused = True
    state.live[prefix] = Live(0, prefix, 0.0, game_id="g1")
    referee_loop = Loop()  # (the referee's, in salvo tournament run: the director runs on it)
    loop_thread = threading.Thread(target=referee_loop.run, daemon=True)
    loop_thread.start()
    d = director(broker, tmp_path, state, prefix, referee_loop)
    heard = [TournamentTopics.assignments(), TournamentTopics.standings]
    teams = Recorder(Broker.from_url(broker.url("referee")), heard, label="teams")
    loop = threading.Thread(target=d.run, daemon=True)
    try:
        for team in (a, b):
            d.tell(team, {"id": "0-0", "round": 1, "arena": prefix, "opponents": [b if team == a else a]})
        loop.start()
        # The game ends as the referee publishes it: the stats, then the state
        # (the director records it once the stats are in).
        t = Topics(prefix)
        results = game_over(t, a, b)
        for topic, payload in results.items():
            teams.publish(topic, payload, retain=True)

        def recorded(m: Any) -> bool:  # this director's standings (others are retained on the session's broker)
            body = json.loads(m.payload or b"{}") if m.topic == TournamentTopics.standings else {}
            return body.get("games_played") == 1 and {r["team"] for r in body["table"]} == set(names)

        teams.wait(recorded, timeout=15, what="the result in the standings")
        for team in (a, b):
            told = teams.latest(TournamentTopics.assignment(team))
            assert told is not None and told.payload == b"", f"{team} still told {told.payload if told else None!r}"
        assert d.state.paused and not d.state.live
    finally:
        d.halt()
        loop.join(10)
        d.close()
        for team in (a, b):
            teams.publish(TournamentTopics.assignment(team), "", retain=True)
        teams.close()
        referee_loop.call_soon_threadsafe(referee_loop.stop)
        loop_thread.join(5)
        referee_loop.close()


def test_health_reports_a_stuck_loop(broker: Mosquitto, tmp_path: Path, prefix: str) -> None:
    from salvo.organiser.tournament.health import LOOP_STALE_S

    state = State("round-robin", 1, ["a", "b"])
    d = director(broker, tmp_path, state, prefix)
    try:
        assert d.health()["ok"] is True and d.health()["arenas"] == {}  # (a referee without connections to ask)
        d.ticked -= LOOP_STALE_S + 1  # the loop has not come round since
        health = d.health()
        assert health["ok"] is False and "loop has not come round for 11 s" in health["reason"], health
    finally:
        d.close()
    assert "stopping" in d.health()["reason"]


def test_a_game_ended_without_a_result_while_away_is_played_again(
    broker: Mosquitto, tmp_path: Path, prefix: str
) -> None:
    """The walkthrough's crash loop: a tournament game in progress, the
    evening switched to free play with SALVO_FRESH and back; the director,
    taking its arena over from the free-play referee, abandons that game in
    its journal, then its adoption took the abandoned game for a played one
    (no places: a TypeError at every start, Docker restarting it for ever,
    `tournament status` crashing too). Now it counts for nothing and the
    pair plays again."""
    from nacl.public import PrivateKey

    from salvo.arena.journal import Store
    from salvo.arena.resume import make_arenas
    from salvo.game.events import Abandon, Config

    from kit import Driver

    store = Store(tmp_path / "referee.db")
    (arena,) = make_arenas([prefix], Config(), None, PrivateKey.generate(), store)
    drive = Driver(prefix=prefix)
    drive.game = arena.game

    def send(event: Any) -> Any:  # the referee's way: the engine, then the journal
        game_no = arena.game.game_no
        result = arena.game.handle(event)
        store.record(prefix, game_no, event)
        return result

    drive.send = send  # type: ignore[method-assign]
    drive.start({"a": ROWS, "d": COLUMNS})  # a turn under way
    game_id = arena.game.game_id
    drive.ok(Abandon("salvo referee: taken over from a free-play referee", drive.now))
    store.settle()
    state = State("round-robin", 3, ["a", "b", "c", "d"])
    state.draw()
    fixture = next(i for i, f in enumerate(state.fixtures) if set(f.teams) == {"a", "d"})
    state.live[prefix] = Live(fixture, prefix, drive.now - 60, game_id=game_id)
    d = director(broker, tmp_path, state, prefix)
    d.store = store
    try:
        d.adopt()
        (result,) = d.state.results
        assert (result.status, result.counts, result.termination) == ("aborted", False, "abandoned")
        assert fixture in d.state.pending()  # played again
        assert d.status()["standings"][0]["played"] == 0  # the status and the standings work (they crashed)
    finally:
        d.close()
        store.close()


def test_refusal_codes_are_snake_case_like_the_protocols() -> None:
    """Issue 30: the tournament's codes were kebab-case, the protocol's snake_case."""
    with pytest.raises(ValueError, match="snake_case"):
        ControlError("not-paused", "x")
    assert ControlError("not_paused", "the clock runs").as_json() == {"code": "not_paused", "reason": "the clock runs"}


class Later(StandIn):
    """A referee on the director's loop: each pause answered when the test says (a Future)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Future[bool]] = []

    def pause_game(self, prefix: str, reason: str) -> Future[bool]:  # type: ignore[override]
        self.calls.append(("pause_game", prefix))
        self.asked.append(Future())
        return self.asked[-1]


def test_on_the_loop_a_control_waits_for_the_referee_without_holding_the_loop(
    broker: Mosquitto, tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In salvo tournament run the director runs on its referee's loop, which
    applies the control: waiting there would wait for ever. The control
    waits as a step: the loop goes on, the console still reads the status,
    no other step runs; the answer applies it, and no answer in time
    refuses it."""
    state = State("round-robin", 1, ["a", "b"])
    state.draw()
    state.paused = True
    state.live[prefix] = Live(0, prefix, 0.0, game_id="g1")
    loop = Loop()
    loop_thread = threading.Thread(target=loop.run, daemon=True)
    loop_thread.start()
    d = director(broker, tmp_path, state, prefix, loop)
    referee = Later()
    d.referee = referee
    night = threading.Thread(target=d.run, daemon=True)
    night.start()
    try:
        answers: list[dict[str, Any]] = []
        asking = threading.Thread(target=lambda: answers.append(d.request("pause-game", {"arena": prefix}, "test")))
        asking.start()
        wait_until(lambda: bool(referee.asked), what="the referee asked")
        # The loop goes on meanwhile (a timer of it fires), and nothing else of
        # the director's runs: no step for longer than two of its ticks.
        ticked = d.ticked
        turned = threading.Event()
        loop.call_soon_threadsafe(lambda: loop.call_later(2.5 * TICK_S, turned.set))
        assert turned.wait(10)
        assert d.status()["tournament"]["paused"] is True and not answers and d.ticked == ticked
        referee.asked[0].set_result(True)
        asking.join(10)
        assert answers and answers[0]["action"] == "pause-game" and answers[0]["result"] == "ok"
        monkeypatch.setattr(steps, "ANSWER_WAIT_S", 0.3)
        with pytest.raises(ControlError) as unanswered:
            d.request("pause-game", {"arena": prefix}, "test")
        assert unanswered.value.code == "not_running" and [a["action"] for a in d.state.audit] == ["pause-game"]
    finally:
        d.halt()
        night.join(10)
        d.close()
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()
