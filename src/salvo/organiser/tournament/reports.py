"""What the organiser reads: the live status (console, ``salvo tournament
status``) and the exports after the night (``salvo tournament export``),
from the state alone (exports work with the director stopped)."""

from __future__ import annotations

import csv
import io
from typing import Any

from salvo.organiser.tournament.scoring import Row
from salvo.organiser.tournament.state import State

GAME_COLUMNS = (
    "game",
    "round",
    "arena",
    "journal_game",
    "game_id",
    "teams",
    "status",
    "winner",
    "forfeited",
    "places",
    "termination",
    "turns",
    "duration_s",
    "started",
    "ended",
    "note",
)
TEAM_COLUMNS = (
    "rank",
    "team",
    "played",
    "wins",
    "draws",
    "losses",
    "forfeits",
    "points",
    "head_to_head",
    "buchholz",
    "shots",
    "hits",
    "accuracy",
    "ships_sunk",
    "ships_lost",
    "avg_place",
    "withdrawn",
)


def games(state: State) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(state.results):
        out.append(
            {
                "game": i,
                "round": r.round,
                "arena": r.arena,
                "journal_game": r.journal_game,
                "game_id": r.game_id,
                "teams": list(r.players),
                "status": r.status,
                "winner": r.winner,
                "forfeited": list(r.forfeited),
                "places": {p: r.place_of(p) for p in r.players},
                "termination": r.termination,
                "turns": r.turns,
                "duration_s": r.duration_s,
                "started": r.started,
                "ended": r.ended,
                "note": r.note,
                "stats": r.stats,
            }
        )
    return out


def teams(state: State) -> list[dict[str, Any]]:
    """The standings with each team's totals over the games that count."""
    out = []
    for rank, row in enumerate(state.table(), 1):
        counted = [r for r in state.results if r.counts and row.team in r.players]
        sunk = sum(int(r.stats.get(row.team, {}).get("ships_sunk", 0)) for r in counted)
        lost = sum(int(r.stats.get(row.team, {}).get("ships_lost", 0)) for r in counted)
        places = [r.place_of(row.team) for r in counted]
        out.append(
            {
                "rank": rank,
                **row.as_json(),
                "ships_sunk": sunk,
                "ships_lost": lost,
                "avg_place": round(sum(places) / len(places), 2) if places else None,
            }
        )
    return out


def export_json(state: State) -> dict[str, Any]:
    return {
        "format": state.format,
        "table_size": state.table_size,
        "rounds": state.total_rounds,
        "done": state.done,
        "teams": teams(state),
        "games": games(state),
        "withdrawn": list(state.withdrawn),
        "late": dict(state.late),
        "audit": list(state.audit),
    }


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(map(str, value))
    if isinstance(value, dict):
        return " ".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def export_csv(state: State, what: str) -> str:
    if what not in ("games", "teams"):
        raise ValueError(f"export games or teams, not {what!r}")
    rows, columns = (games(state), GAME_COLUMNS) if what == "games" else (teams(state), TEAM_COLUMNS)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def status(state: State, arenas: list[dict[str, Any]] | None = None, running: bool = True) -> dict[str, Any]:
    """What the console shows; ``arenas`` from the director's live view."""
    table = teams(state)
    counted = sum(1 for r in state.results if r.counts)
    pending = state.pending()
    live_fixtures = {lv.fixture for lv in state.live.values()}
    undrawn = 0
    if state.format == "swiss" and state.drawn < state.rounds:
        per_round = max(1, len(state.active) // state.table_size)
        undrawn = (state.rounds - state.drawn) * per_round
    current = min((state.fixtures[i].round for i in [*pending, *live_fixtures]), default=state.drawn)
    return {
        "tournament": {
            "format": state.format,
            "table_size": state.table_size,
            "rounds": state.total_rounds,
            "round": current,
            "games_total": counted + len(pending) + len(live_fixtures) + undrawn,
            "games_played": counted,
            "games_left": len(pending) + len(live_fixtures) + undrawn,
            "paused": state.paused,
            "done": state.done,
            "running": running,
            "leader": table[0]["team"] if table and counted else None,
        },
        "arenas": arenas if arenas is not None else [],
        "standings": table,
        "games": [{k: v for k, v in g.items() if k != "stats"} for g in games(state)],
        "pending": [{"round": state.fixtures[i].round, "teams": state.fixtures[i].teams} for i in pending],
        "late": [{"team": t, "status": s} for t, s in state.late.items()],
        "audit": list(state.audit[-50:]),
    }


def standings(state: State, rows: list[Row]) -> dict[str, Any]:
    """What /tournament/standings says (``rows``: the state's table)."""
    return {
        "format": state.format,
        "table_size": state.table_size,
        "rounds": state.total_rounds,
        "games_played": sum(1 for r in state.results if r.counts),
        "paused": state.paused,
        "done": state.done,
        "table": [r.as_json() for r in rows],
    }


def schedule(state: State) -> dict[str, Any]:
    """What /tournament/schedule says: the current round's games and every fixture."""
    current = min((f.round for i, f in enumerate(state.fixtures) if not state.fixture_done(i)), default=state.drawn)
    games = [f.teams for f in state.fixtures if f.round == current]
    fixtures = [
        {"round": f.round, "teams": f.teams, "done": state.fixture_done(i)} for i, f in enumerate(state.fixtures)
    ]
    return {"round": current, "games": games, "fixtures": fixtures}
