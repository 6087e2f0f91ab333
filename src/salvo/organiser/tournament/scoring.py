"""Points and standings (pure).

Every game, duel or table of 3-4 teams, is scored as the duels its finishing
order implies: against each other team at the table a team earns 2 points
for finishing ahead of it, 1 for finishing level, 0 behind. A duel is then
2 for a win, 1 each for a draw, 0 for a loss; at a table of four the places
earn 6, 4, 2 and 0. A team that forfeited (never had a fleet in time, or was
withdrawn) finishes behind everybody present and earns nothing, not even
against another absentee.

Ties in the table break on, in order: head-to-head (the points the tied
teams took off each other), Buchholz (the sum of the points of every
opponent met; it rewards a harder draw in a swiss), hits, accuracy, name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: results that count in the standings; "void" and "aborted" ones do not
COUNTED = ("played", "forfeit", "overridden")


@dataclass
class GameResult:
    round: int
    arena: str
    players: list[str]
    winner: str | None
    stats: dict[str, dict[str, Any]]
    #: teams that lost by not turning up with a fleet (or by withdrawing)
    forfeited: list[str] = field(default_factory=list)
    #: the fixture this result is for (its index in State.fixtures); -1 in old state files
    fixture: int = -1
    #: "played" | "forfeit" | "overridden" | "void" | "aborted"
    status: str = ""
    #: team -> finishing place (1 = first); derived from stats when empty
    places: dict[str, int] = field(default_factory=dict)
    game_id: str | None = None
    journal_game: int | None = None
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    turns: int | None = None
    #: "victory" | "forfeit" | "draw" as the referee ended it, or "no-show", "withdrawn"
    termination: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not self.status:
            self.status = "forfeit" if self.forfeited else "played"

    @property
    def counts(self) -> bool:
        return self.status in COUNTED

    def place_of(self, team: str) -> int:
        """Finishing place: absentees last, the winner first, else the stats' place."""
        if team in self.forfeited:
            return len(self.players) + 1
        if team in self.places:
            return self.places[team]
        place = self.stats.get(team, {}).get("place")
        if isinstance(place, int):  # (a game ended without places has none)
            return place
        if self.winner is None:
            return 1
        return 1 if self.winner == team else 2

    def points_against(self, team: str, other: str) -> int:
        if team in self.forfeited:
            return 0
        if other in self.forfeited:
            return 2
        mine, theirs = self.place_of(team), self.place_of(other)
        return 2 if mine < theirs else 1 if mine == theirs else 0

    def points(self, team: str) -> int:
        return sum(self.points_against(team, o) for o in self.players if o != team)


@dataclass
class Row:
    team: str
    played: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    forfeits: int = 0
    points: int = 0
    shots: int = 0
    hits: int = 0
    buchholz: int = 0
    head_to_head: int = 0
    withdrawn: bool = False

    @property
    def accuracy(self) -> float:
        return round(self.hits / self.shots, 3) if self.shots else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy}


def standings(teams: list[str], results: list[GameResult], withdrawn: frozenset[str] = frozenset()) -> list[Row]:
    counted = [r for r in results if r.counts]
    rows = {t: Row(t, withdrawn=t in withdrawn) for t in teams}
    for r in counted:
        for name in r.players:
            row = rows.setdefault(name, Row(name))
            row.played += 1
            s = r.stats.get(name, {})
            row.shots += int(s.get("shots", 0))
            row.hits += int(s.get("hits", 0))
            row.points += r.points(name)
            if name in r.forfeited:
                row.losses += 1
                row.forfeits += 1
            elif (
                r.place_of(name) == 1
                and len(present := [o for o in r.players if o not in r.forfeited]) > 1
                and all(r.place_of(o) == 1 for o in present)
            ):
                row.draws += 1  # everybody present finished level
            elif r.place_of(name) == 1:
                row.wins += 1
            else:
                row.losses += 1
    for r in counted:
        for name in r.players:
            rows[name].buchholz += sum(rows[o].points for o in r.players if o != name)
    # Head-to-head only among the teams level on points.
    by_points: dict[int, list[str]] = {}
    for row in rows.values():
        by_points.setdefault(row.points, []).append(row.team)
    for level in by_points.values():
        if len(level) > 1:
            tied = set(level)
            for r in counted:
                for name in tied & set(r.players):
                    rows[name].head_to_head += sum(r.points_against(name, o) for o in tied & set(r.players) - {name})
    return sorted(rows.values(), key=lambda x: (-x.points, -x.head_to_head, -x.buchholz, -x.hits, -x.accuracy, x.team))


def ranking_text(rows: list[Row]) -> str:
    """The printed ranking: forfeits and withdrawals shown."""
    head = f"{'#':>2}  {'team':<20} {'P':>3} {'W':>3} {'D':>3} {'L':>3} {'F':>3} {'pts':>4} {'BH':>4}"
    head += f" {'hits':>5} {'acc':>6}"
    lines = [head]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"{i:>2}  {r.team:<20} {r.played:>3} {r.wins:>3} {r.draws:>3} {r.losses:>3} {r.forfeits:>3} "
            f"{r.points:>4} {r.buchholz:>4} {r.hits:>5} {r.accuracy:>6.1%}" + ("  withdrawn" if r.withdrawn else "")
        )
    lines.append("P played, W won, D drawn, L lost (F of them forfeited), pts points, BH Buchholz")
    return "\n".join(lines)
