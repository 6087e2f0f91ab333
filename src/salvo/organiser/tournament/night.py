"""A night: who plays, the arenas' admission rule, and running the director
with its referee until the tournament is over or stopped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from salvo.net.mqtt import Broker, clear_retained, read_retained
from salvo.organiser.tournament.errors import TournamentError
from salvo.organiser.tournament.scoring import Row
from salvo.spec.errors import Code, Illegal
from salvo.spec.topics import TournamentTopics

if TYPE_CHECKING:
    from salvo.arena.arena import Arena
    from salvo.organiser.tournament.director import Director
    from salvo.referee.admission import Registry
    from salvo.referee.service import Referee


def entrants(registry: Registry, source: Path) -> list[str]:
    """The registered teams, in name order; a tournament needs two."""
    teams = sorted(registry.teams)
    if len(teams) < 2:
        raise TournamentError(f"a tournament needs at least two registered teams; {source} has {len(teams)}")
    return teams


def no_show_error(no_show_after: float, placement_timeout: float) -> str | None:
    """Why a no-show deadline (0: none) cannot be used with this placement
    timeout, or None."""
    if no_show_after and no_show_after <= placement_timeout:
        return f"must be longer than --placement-timeout ({placement_timeout:g}s): a slow placer is not a no-show"
    return None


def restrict_lobbies(arenas: list[Arena]) -> dict[str, set[str]]:
    """Let into each arena only the teams scheduled there now (their secret
    is the registry's to check: the referee's ``registry``). The roster
    returned (arena -> those teams) is the director's to change; each arena
    asks it when a join is read and again when it is applied, so a roster
    emptied while a key was derived (a no-show) keeps the join out."""
    roster: dict[str, set[str]] = {arena.topics.prefix: set() for arena in arenas}
    for arena in arenas:
        p = arena.topics.prefix

        def seat(name: str, p: str = p) -> None:
            if name not in roster[p]:
                raise Illegal(
                    Code.NOT_REGISTERED,
                    f"{name!r} is not scheduled in arena {p!r} now; see /tournament/assignments/{name}",
                )

        arena.seat = seat
    return roster


def hold(
    director: Director,
    service: Referee,
    *,
    on_started: Callable[[], object] = lambda: None,
    on_done: Callable[[list[Row]], object] = lambda _rows: None,
    connect_timeout: float = 30.0,
) -> list[Row] | None:
    """Run the night with its referee until every game is played: the final
    standings; None when it was stopped first (the same state file carries
    on, and nothing was published that sends a team home)."""
    director.adopt()  # before the referee reads the joins the broker kept for it
    service.start()
    if not service.wait_connected(connect_timeout):
        director.close()  # (first: its connection may be on the referee's loop)
        service.stop()
        raise TournamentError(f"cannot reach the broker at {director.broker.url}")
    on_started()
    rows: list[Row] | None = None
    try:
        rows = director.run()
        if rows is not None:
            on_done(rows)  # (the director still answers, the referee still runs)
    except KeyboardInterrupt:
        director.halt()
    finally:
        director.close()
        service.stop()
    return rows


def clear_for_free_play(broker: Broker) -> list[str]:
    """Free play takes the arenas: no tournament game is on. Every team's
    assignment goes (a team's ``--tournament`` client would otherwise join
    a free-play game as its tournament game); when /tournament/standings
    says the tournament is done, its standings and schedule go too, so that
    the room's pages show free play instead of the champion for ever. An
    unfinished tournament keeps its table; its director, back, tells the
    teams again where to play. The topics cleared, in order."""
    t = TournamentTopics
    found = read_retained(broker, list(t.public_filters()), t.marker)
    try:
        done = json.loads(found.get(t.standings, b"{}")).get("done") is True
    except (ValueError, AttributeError):
        done = False
    cleared = sorted(topic for topic in found if done or topic not in (t.standings, t.schedule))
    if cleared:
        clear_retained(broker, cleared)
    return cleared
