"""Following each arena's game to its result, from the arena's public
topics as the director's watcher last heard them: the game started (its id),
a no-show, the table seated, the result (the stats summary and every
player's stats). The other way a result comes in is the journal, after a
restart (:mod:`.adoption`); the director (:mod:`.director`) calls these at
every step, one arena at a time, and records what they find. Those that
ask the referee are steps (:mod:`.steps`): they wait for its answer."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from salvo.organiser.tournament.scoring import GameResult
from salvo.organiser.tournament.steps import Step, ask
from salvo.spec.rules import SHIP_IDS
from salvo.spec.topics import Topics
from salvo.spec.wire import PlayerStats, StatsSummary

if TYPE_CHECKING:
    from salvo.organiser.journaltools import GameSummary
    from salvo.organiser.tournament.director import Director
    from salvo.organiser.tournament.state import Live

log = logging.getLogger("salvo.organiser.tournament")

#: How often an arena's intruders are sent away at most (send_intruders_away).
INTRUDERS_EVERY_S = 10.0


def step(d: Director, arena: str) -> Step[None]:
    if arena in d.finishing and d.value(Topics(arena).state) == b"lobby":
        del d.finishing[arena]
    live = d.state.live.get(arena)
    if live is None:
        return
    t = Topics(arena)
    teams = d.state.fixtures[live.fixture].teams
    state = d.value(t.state)
    if live.game_id is None:
        yield from seat(d, arena, len(teams))
        if state in (b"placement", b"turn", b"over"):
            live.game_id = (d.value(t.game_id) or b"").decode() or None
            live.started = time.time()
            d.save()
        elif d.no_show_after is not None and time.time() - live.assigned_at > d.no_show_after:
            yield from no_show(d, arena, live, teams)
        return
    if d.value(t.game_id) != live.game_id.encode():
        return  # not our game's topics (yet): a restart before the retained state came
    summary = d.value(t.stats_summary)
    players = _players(d, arena, teams)
    if summary and players and all(d.value(t.stats_player(p)) for p in players):
        yield from _record_played(d, arena, live, teams, summary, players)


def seat(d: Director, arena: str, players: int) -> Step[None]:
    """Tables: the arena's game starts when all ``players`` are ready (a
    table of 3 that has 2 ready must not start without the third)."""
    if d.state.table_size == 2 or d.seated.get(arena) == players:
        return
    if d.referee is not None and (yield from ask(d.referee.seat(arena, players))):  # False: asked again next step
        d.seated[arena] = players


def send_intruders_away(d: Director, arena: str) -> Step[None]:
    """An arena no fixture holds whose lobby has players: nobody put them
    there (every roster is emptied when its game ends), so they would hold
    it for the rest of the night. Close its lobby."""
    listed, now, last = d.listed(arena), time.monotonic(), d.cleared.get(arena)
    if d.value(Topics(arena).state) != b"lobby" or not listed or arena in d.finishing:
        return
    if d.referee is None or (last is not None and now - last < INTRUDERS_EVERY_S):
        return
    d.cleared[arena] = now
    reason = f"not on the tournament's roster: {', '.join(listed)} (no game is assigned to arena {arena})"
    if (yield from ask(d.referee.close_lobby(arena, reason))):
        log.warning("arena %s: sent away %s", arena, reason)


def hold_the_finished(d: Director) -> None:
    """After a restart: the teams still listed in an arena whose game is
    over (its reset to come) are busy there until it is back in its
    lobby, as if this director had seen the game end (what it knew of
    that, in memory, did not survive a kill). Without this a restart
    between a result and the arena's reset assigned such a team to the
    other arena while the first still listed it (tests/test_tournament_faults.py)."""
    for arena in d.arenas:
        if arena in d.state.live or arena in d.finishing:
            continue
        if d.value(Topics(arena).state) == b"over" and (listed := d.listed(arena)):
            d.finishing[arena] = set(listed)


def _players(d: Director, arena: str, teams: list[str]) -> list[str]:
    listed = d.listed(arena)
    return [p for p in teams if p in listed] or [p for p in teams if d.value(Topics(arena).stats_player(p))]


def _record_played(d: Director, arena: str, live: Live, teams: list[str], raw: bytes, players: list[str]) -> Step[None]:
    t = Topics(arena)
    summary = StatsSummary.model_validate_json(raw)
    stats = {p: PlayerStats.model_validate_json(d.value(t.stats_player(p)) or b"").model_dump() for p in players}
    result = GameResult(
        d.state.fixtures[live.fixture].round,
        arena,
        list(teams),
        summary.winner or None,
        stats,
        forfeited=[p for p in teams if p not in players],
        fixture=live.fixture,
        status="played",
        game_id=live.game_id,
        started=live.started,
        ended=time.time(),
        duration_s=round(summary.duration_s, 3),
        turns=summary.turns,
        termination=summary.termination,
    )
    yield from _journal_details(d, result)
    d.record(arena, result)


def _journal_details(d: Director, result: GameResult) -> Step[None]:
    """The journal's game number and times of the game (when the store is
    at hand), looked up on the director's worker: SQLite and a replay of
    the game, milliseconds no arena may wait for. The director's next step
    waits for it (as for the referee's answers), the loop does not."""
    store, game_id = d.store, result.game_id
    if store is None or game_id is None:
        return
    found: list[GameSummary] = []

    def look() -> bool:  # on the worker
        from salvo.organiser import journaltools

        try:
            where = journaltools.find_game(store, game_id, result.arena)
            if where is not None:
                found.append(journaltools.summarize(store, *where))
        except Exception:  # the result stands without its journal details
            log.exception("journal lookup of game %s failed", game_id)
        return bool(found)

    if not (yield d.keeper.run(look)):  # (False too when it took over steps.ANSWER_WAIT_S)
        return
    summary = found[0]
    result.journal_game = summary.game_no
    result.started = summary.started or result.started
    result.ended = summary.ended or result.ended


def no_show(d: Director, arena: str, live: Live, teams: list[str]) -> Step[None]:
    """The game never started: close the lobby and score a forfeit, unless
    it started at the last moment (then it is played out)."""
    t = Topics(arena)
    ready = [p for p in teams if all(d.value(t.approved(p, ship)) == b"true" for ship in SHIP_IDS)]
    absent = [p for p in teams if p not in ready]
    reason = f"no-show: {' and '.join(absent)} not ready {d.no_show_after:g}s after the assignment"
    d.roster[arena] = set()  # nobody else gets in while it closes
    if d.referee is None or not (yield from ask(d.referee.close_lobby(arena, reason))):
        d.roster[arena] = set(teams)
        return
    winner = ready[0] if len(ready) == 1 else None
    result = GameResult(
        d.state.fixtures[live.fixture].round,
        arena,
        list(teams),
        winner,
        {},
        forfeited=absent,
        fixture=live.fixture,
        status="forfeit",
        termination="no-show",
        note=reason,
    )
    log.warning("%s in %s", reason, arena)
    d.record(arena, result)
