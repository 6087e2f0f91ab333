"""A restarted director picks up where it stopped, from its state file and
the referee's journal (both on this machine): a game assigned before the stop
goes on in its arena, or, when it ended while the director was away, its
result is taken from the journal. Nothing is played twice, nothing is
forfeited for the director's absence."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from salvo.game.events import Termination
from salvo.organiser.tournament.scoring import GameResult

if TYPE_CHECKING:
    from salvo.organiser.tournament.director import Director
    from salvo.organiser.tournament.state import Live

log = logging.getLogger("salvo.organiser.tournament")

#: clocks of the referee's journal and the director are the same machine's; allow for rounding
CLOCK_SLACK_S = 5.0


def journal_game(d: Director, arena: str, live: Live) -> Any | None:
    """The journal's summary of the live fixture's game in ``arena``: the game
    with its id when known, else the latest one with players that began after
    the assignment and seats only the fixture's teams."""
    if d.store is None:
        return None
    from salvo.organiser import journaltools

    teams = set(d.state.fixtures[live.fixture].teams)
    if live.game_id is not None:
        found = journaltools.find_game(d.store, live.game_id, arena)
        return journaltools.summarize(d.store, *found) if found else None
    for summary in reversed(journaltools.games(d.store, arena)):
        if not summary.players:
            continue
        started = summary.started or 0.0
        if set(summary.players) <= teams and started >= live.assigned_at - CLOCK_SLACK_S:
            return summary
        return None  # the latest game with players is not this fixture's
    return None


def adopt(d: Director) -> list[str]:
    adopted: list[str] = []
    for arena, live in list(d.state.live.items()):
        if arena not in d.arenas:
            continue
        fixture = d.state.fixtures[live.fixture]
        d.roster[arena] = set(fixture.teams)
        summary = journal_game(d, arena, live)
        if summary is not None and summary.over:
            result = _from_journal(summary, fixture.round, arena, fixture.teams, live.fixture)
            d.record(arena, result)
            log.info(
                "round %d: %s ended in %s while the director was away (%s)%s",
                fixture.round,
                fixture.teams,
                arena,
                summary.termination,
                "" if result.counts else "; it is played again",
            )
            continue
        if summary is not None and summary.game_id and summary.termination not in ("lobby", ""):
            live.game_id, live.started = summary.game_id, summary.started
        # Told again: free play meanwhile (or an organiser) may have cleared it.
        d.tell_assignment(arena)
        adopted.append(arena)
        log.info("round %d: %s carries on in arena %s", fixture.round, " vs ".join(fixture.teams), arena)
    d.save()
    d.hold_the_finished()
    playing = d.busy_teams()
    for team in d.state.teams:
        if team in d.state.withdrawn:
            d.tell(team, {"done": True, "withdrawn": True})
        elif team not in playing:
            # Whatever is retained there is from before (a stale {"done": true}
            # of an earlier evening would send a team home at once).
            d.tell(team, "")
    for team, status in d.state.late.items():
        if status == "pending":
            d.tell(team, {"waiting": "registered after the start: the organisers decide whether you play"})
        elif status == "refused":
            d.tell(team, {"done": True, "refused": "registered after the start: not in this tournament"})
    return adopted


#: How a game the referee ended with a result ends (events.Termination).
RESULTS = frozenset(t.value for t in Termination)


def _from_journal(summary: Any, round_no: int, arena: str, teams: list[str], fixture: int) -> GameResult:
    """The result the journal holds; a game that ended without one (ended
    by another referee taking the arena over, aborted, its lobby closed)
    counts for nothing and is played again, like an aborted one."""
    if summary.termination not in RESULTS:
        return GameResult(
            round_no,
            arena,
            list(teams),
            None,
            {},
            fixture=fixture,
            status="aborted",
            game_id=summary.game_id,
            journal_game=summary.game_no,
            started=summary.started,
            ended=summary.ended,
            termination=summary.termination,
            note=f"ended without a result while the director was away: {summary.termination}",
        )
    return GameResult(
        round_no,
        arena,
        list(teams),
        summary.winner,
        {p: dict(s) for p, s in summary.stats.items()},
        forfeited=[t for t in teams if t not in summary.players],
        fixture=fixture,
        status="played",
        game_id=summary.game_id,
        journal_game=summary.game_no,
        started=summary.started,
        ended=summary.ended,
        duration_s=summary.duration_s,
        turns=summary.turns,
        termination=summary.termination,
    )
