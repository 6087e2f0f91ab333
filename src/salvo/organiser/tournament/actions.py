"""The organiser's controls applied to the director (on its loop's thread,
between steps). Each is checked first and refused with a ControlError that
changes nothing; an applied one is saved with its audit entry. A control
that needs the referee (a game's clock, a lobby, an abort) is a step
(:mod:`.steps`): it waits for the referee's answer, and nothing else of the
director's runs meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from salvo.organiser.tournament import steps
from salvo.organiser.tournament.controls import ACTIONS, ControlError
from salvo.organiser.tournament.scoring import GameResult
from salvo.organiser.tournament.steps import Step, ask

if TYPE_CHECKING:
    from salvo.organiser.tournament.director import Director
    from salvo.organiser.tournament.steps import ArenaOps

MAX_EXTRA_S = 3600.0


def apply(d: Director, action: str, args: dict[str, Any], by: str, request: str | None = None) -> dict[str, Any]:
    """:func:`applying` on this thread, waiting for the referee's answers
    (a director without a loop; tests)."""
    return steps.now(applying(d, action, args, by, request))


def applying(
    d: Director, action: str, args: dict[str, Any], by: str, request: str | None = None
) -> Step[dict[str, Any]]:
    """The control applied, as a step (it may wait for the referee): its audit entry."""
    spec = ACTIONS.get(action)
    if spec is None:
        raise ControlError("unknown_action", f"no action {action!r}; actions: {', '.join(ACTIONS)}")
    missing = [a for a, kind in spec.args.items() if a not in args and kind != "text"]
    if missing:
        raise ControlError("bad_arguments", f"{action} needs {', '.join(missing)}")
    clean = {a: args.get(a, "") for a in spec.args}
    if d.state.done and action not in ("void-game", "override"):
        raise ControlError("tournament_over", "the tournament is over: only results can still be changed")
    handled = _HANDLERS[action](d, clean)
    note = (yield from handled) if isinstance(handled, Generator) else handled
    entry: dict[str, Any] = {"at": round(time.time(), 3), "by": by, "action": action, "args": clean}
    entry["result"] = note or "ok"
    if request is not None:
        entry["request"] = request
    d.state.audit.append(entry)
    d.save()
    d.publish_standings()
    d.publish_schedule()
    return entry


# -- checks --------------------------------------------------------------------------------


def _arena(d: Director, args: dict[str, Any], *, live: bool = True) -> str:
    arena = str(args["arena"])
    if arena not in d.arenas:
        raise ControlError("unknown_arena", f"no arena {arena!r}; arenas: {', '.join(d.arenas)}")
    if live and arena not in d.state.live:
        raise ControlError("no_game", f"no tournament game in arena {arena} now")
    return arena


def _team(d: Director, args: dict[str, Any]) -> str:
    team = str(args["team"])
    if team not in d.state.teams:
        raise ControlError("unknown_team", f"{team!r} is not in this tournament")
    if team in d.state.withdrawn:
        raise ControlError("withdrawn", f"{team} has withdrawn already")
    return team


def _game(d: Director, args: dict[str, Any]) -> GameResult:
    try:
        index = int(args["game"])
    except (TypeError, ValueError, OverflowError):
        raise ControlError("bad_arguments", f"game must be a number, not {args['game']!r}") from None
    if not 0 <= index < len(d.state.results):
        raise ControlError("unknown_game", f"no game {index}; games 0-{len(d.state.results) - 1}")
    return d.state.results[index]


def _referee(d: Director) -> ArenaOps:
    """The referee of the director's arenas (a director run without one, as
    some tools do, has nothing to control)."""
    if d.referee is None:
        raise ControlError("unsupported", "this director runs no referee: nothing to control")
    return d.referee


# -- the tournament ---------------------------------------------------------------------------


def _pause(d: Director, _args: dict[str, Any]) -> str:
    if d.state.paused:
        raise ControlError("already_paused", "the tournament is paused already")
    d.state.paused = True
    return "no new game is assigned until resume"


def _resume(d: Director, _args: dict[str, Any]) -> str:
    if not d.state.paused:
        raise ControlError("not_paused", "the tournament is not paused")
    d.state.paused = False
    return "ok"


# -- one game --------------------------------------------------------------------------------


def _pause_game(d: Director, args: dict[str, Any]) -> Step[str]:
    arena = _arena(d, args)
    if not (yield from ask(_referee(d).pause_game(arena, "paused by the organisers"))):
        raise ControlError("not_running", f"no clock to stop in {arena} (paused already, or over)")
    return "ok"


def _resume_game(d: Director, args: dict[str, Any]) -> Step[str]:
    arena = _arena(d, args)
    if not (yield from ask(_referee(d).resume_game(arena))):
        raise ControlError("not_paused", f"the game in {arena} is not paused")
    return "ok"


def _extra_time(d: Director, args: dict[str, Any]) -> Step[str]:
    arena = _arena(d, args)
    try:
        seconds = float(args["seconds"])
    except (TypeError, ValueError, OverflowError):
        raise ControlError("bad_arguments", f"seconds must be a number, not {args['seconds']!r}") from None
    if not 0 < seconds <= MAX_EXTRA_S:
        raise ControlError("bad_arguments", f"seconds must be more than 0 and at most {MAX_EXTRA_S:g}")
    if not (yield from ask(_referee(d).extend(arena, seconds))):
        raise ControlError("not_running", f"no running deadline in {arena}")
    return f"{seconds:g}s more"


def _stop_game(d: Director, arena: str, reason: str) -> Step[None]:
    """End what runs in ``arena``: a lobby is closed, a game abandoned."""
    if d.arena_state(arena) == "lobby":
        if not (yield from ask(_referee(d).close_lobby(arena, reason))):
            raise ControlError("not_running", f"the lobby of {arena} could not be closed")
    elif not (yield from ask(_referee(d).abort_game(arena, reason))):
        raise ControlError("not_running", f"the game in {arena} could not be aborted")


def _abort_game(d: Director, args: dict[str, Any]) -> Step[str]:
    arena = _arena(d, args)
    reason = str(args["reason"]) or "aborted by the organisers"
    live = d.state.live[arena]
    fixture = d.state.fixtures[live.fixture]
    yield from _stop_game(d, arena, reason)
    d.record(
        arena,
        GameResult(
            fixture.round,
            arena,
            list(fixture.teams),
            None,
            {},
            fixture=live.fixture,
            status="aborted",
            game_id=live.game_id,
            started=live.started,
            ended=time.time(),
            termination="aborted",
            note=reason,
        ),
    )
    return "aborted; the game is played again"


def _clear_arena(d: Director, args: dict[str, Any]) -> Step[str]:
    arena = _arena(d, args, live=False)
    if arena in d.state.live:
        return (yield from _abort_game(d, args))
    state = d.arena_state(arena)
    if state not in ("lobby", "turn") or (state == "lobby" and not d.listed(arena)):
        raise ControlError("nothing_to_clear", f"arena {arena} is {state}, with nobody in its lobby and no game to end")
    yield from _stop_game(d, arena, str(args["reason"]) or "cleared by the organisers")
    return "cleared: an empty lobby"


def _void_game(d: Director, args: dict[str, Any]) -> str:
    result = _game(d, args)
    if not result.counts:
        raise ControlError("not_counted", f"that game is {result.status} already")
    if d.state.done:
        raise ControlError("tournament_over", "the tournament is over: a voided game could not be played again")
    if gone := [t for t in result.players if t in d.state.withdrawn]:
        raise ControlError("withdrawn", f"{', '.join(gone)} withdrew: the game could not be played again")
    result.status = "void"
    result.note = str(args["reason"]) or "voided by the organisers"
    return "voided; the game is played again"


def _override(d: Director, args: dict[str, Any]) -> str:
    result = _game(d, args)
    winner = str(args["winner"])
    if winner and winner not in result.players:
        raise ControlError("bad_arguments", f"{winner!r} did not play that game ({', '.join(result.players)})")
    if result.status in ("void", "aborted"):
        raise ControlError("not_counted", f"that game is {result.status}: nothing to override")
    before = {p: result.place_of(p) for p in result.players}
    if winner:
        others = sorted((p for p in result.players if p != winner), key=lambda p: before[p])
        result.places = {winner: 1, **{p: i for i, p in enumerate(others, 2)}}
    else:
        result.places = dict.fromkeys(result.players, 1)
    result.winner = winner or None
    result.forfeited = [p for p in result.forfeited if p != winner]
    result.status = "overridden"
    result.note = str(args["reason"]) or "result set by the organisers"
    return f"winner {winner or 'nobody (draw)'}"


# -- teams -----------------------------------------------------------------------------------


def _withdraw(d: Director, args: dict[str, Any]) -> Step[str]:
    team = _team(d, args)
    reason = str(args["reason"]) or "withdrawn by the organisers"
    for arena, live in list(d.state.live.items()):
        fixture = d.state.fixtures[live.fixture]
        if team in fixture.teams:
            yield from _stop_game(d, arena, f"{team} withdrew: {reason}")
            if len(fixture.teams) <= 2:
                d.record(arena, _forfeit(fixture.round, arena, fixture.teams, team, live.fixture, reason))
            else:  # the table plays again without it, as its pending tables do
                d.record(arena, _forfeit(fixture.round, arena, fixture.teams, team, -1, reason))
                fixture.teams.remove(team)
    forfeited = 0
    for i in d.state.pending():
        fixture = d.state.fixtures[i]
        if team not in fixture.teams:
            continue
        forfeited += 1
        if len(fixture.teams) <= 2:
            d.state.results.append(_forfeit(fixture.round, "", fixture.teams, team, i, reason))
        else:  # a table plays on without it; its forfeit against each is scored apart
            d.state.results.append(_forfeit(fixture.round, "", fixture.teams, team, -1, reason))
            fixture.teams.remove(team)
    d.state.withdrawn.append(team)
    d.save()  # (before the tell, as every change a team is told of)
    d.tell(team, {"done": True, "withdrawn": True})
    return f"{forfeited} remaining game(s) forfeited"


def _forfeit(round_no: int, arena: str, teams: list[str], team: str, fixture: int, reason: str) -> GameResult:
    others = [t for t in teams if t != team]
    return GameResult(
        round_no,
        arena,
        list(teams),
        others[0] if len(others) == 1 else None,
        {},
        forfeited=[team],
        fixture=fixture,
        status="forfeit",
        termination="withdrawn",
        note=reason,
    )


def _late(d: Director, args: dict[str, Any]) -> str:
    team = str(args["team"])
    d.check_registry(now=True)  # registered a moment ago: known before it is judged
    status = d.state.late.get(team)
    if status is None:
        raise ControlError("not_late", f"{team!r} is not a team registered after the start")
    if status != "pending":
        raise ControlError("decided", f"{team} was {status} already")
    return team


def _admit_late(d: Director, args: dict[str, Any]) -> str:
    team = _late(d, args)
    d.state.admit_late(team)
    d.save()
    d.tell(team, {"waiting": "admitted: you play the remaining rounds; your first assignment follows"})
    return "admitted"


def _refuse_late(d: Director, args: dict[str, Any]) -> str:
    team = _late(d, args)
    d.state.late[team] = "refused"
    d.save()
    d.tell(team, {"done": True, "refused": "registered after the start: not in this tournament"})
    return "refused"


#: Each action's handler: its note, or a step that ends with it.
_HANDLERS: dict[str, Callable[[Director, dict[str, Any]], str | Step[str]]] = {
    "pause": _pause,
    "resume": _resume,
    "pause-game": _pause_game,
    "resume-game": _resume_game,
    "extra-time": _extra_time,
    "abort-game": _abort_game,
    "clear-arena": _clear_arena,
    "void-game": _void_game,
    "override": _override,
    "withdraw": _withdraw,
    "admit-late": _admit_late,
    "refuse-late": _refuse_late,
}
assert set(_HANDLERS) == set(ACTIONS)
