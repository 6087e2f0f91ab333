"""What the director has decided, persisted (atomically) after every change:
the fixtures (who meets whom, round by round), the results, the games in
progress, the organiser's actions (the audit), withdrawn and late teams.

A fixture is done when a result that counts is recorded for it; a voided
or aborted result leaves it to be played again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from salvo.organiser.tournament import formats
from salvo.organiser.tournament.scoring import GameResult, Row, standings

FORMATS = ("round-robin", "swiss")


@dataclass
class Fixture:
    round: int
    teams: list[str]


@dataclass
class Live:
    """A fixture assigned to an arena and not recorded yet."""

    fixture: int
    arena: str
    assigned_at: float
    #: the referee's /game/id once the game left the lobby
    game_id: str | None = None
    started: float | None = None
    #: what the teams were told (/tournament/assignments/TEAM's "id"): new for
    #: every assignment, the same when a restarted director tells them again
    assignment_id: str = ""

    def told_id(self) -> str:
        return self.assignment_id or f"{self.fixture}-{int(self.assigned_at)}"  # (state files from before)


@dataclass
class State:
    format: str
    rounds: int
    teams: list[str]
    results: list[GameResult] = field(default_factory=list)
    #: old state files: round number -> its pairings (read, then turned into fixtures)
    schedule: dict[str, list[list[str]]] = field(default_factory=dict)
    table_size: int = 2
    fixtures: list[Fixture] = field(default_factory=list)
    #: the rounds drawn so far (swiss draws one when the previous is done)
    drawn: int = 0
    byes: list[str] = field(default_factory=list)
    live: dict[str, Live] = field(default_factory=dict)
    paused: bool = False
    withdrawn: list[str] = field(default_factory=list)
    #: team -> "pending" | "admitted" | "refused" (registered after the start)
    late: dict[str, str] = field(default_factory=dict)
    audit: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    # -- file --------------------------------------------------------------------------

    @staticmethod
    def load(path: Path) -> State | None:
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        raw["results"] = [GameResult(**r) for r in raw.get("results", [])]
        raw["fixtures"] = [Fixture(**f) for f in raw.get("fixtures", [])]
        raw["live"] = {a: Live(**v) for a, v in raw.get("live", {}).items()}
        state = State(**raw)
        state._upgrade()
        return state

    def _upgrade(self) -> None:
        """A state file of an earlier version: its schedule becomes fixtures."""
        if self.fixtures or not self.schedule:
            return
        for key in sorted(self.schedule, key=int):
            for pair in self.schedule[key]:
                self.fixtures.append(Fixture(int(key), list(pair)))
        self.drawn = max(int(k) for k in self.schedule)
        for r in self.results:
            if r.fixture < 0:
                r.fixture = next(
                    (i for i, f in enumerate(self.fixtures) if f.round == r.round and set(f.teams) == set(r.players)),
                    -1,
                )
        self.schedule = {}

    def save(self, path: Path) -> None:
        write(path, asdict(self))

    # -- the draw ------------------------------------------------------------------------

    @property
    def active(self) -> list[str]:
        return [t for t in self.teams if t not in self.withdrawn]

    def table(self) -> list[Row]:
        return standings(self.teams, self.results, frozenset(self.withdrawn))

    def fixture_done(self, i: int) -> bool:
        return any(r.fixture == i and r.counts for r in self.results)

    def pending(self) -> list[int]:
        """Fixtures neither recorded nor in progress, in order."""
        going = {lv.fixture for lv in self.live.values()}
        return [i for i in range(len(self.fixtures)) if not self.fixture_done(i) and i not in going]

    def round_complete(self, round_no: int) -> bool:
        return all(self.fixture_done(i) for i, f in enumerate(self.fixtures) if f.round == round_no)

    def draw(self) -> bool:
        """Draw the next round when the format allows it now; True if drawn."""
        if self.drawn >= self.rounds or self.done:
            return False
        if self.format == "round-robin":
            everything = formats.round_robin_tables(self.teams, self.table_size, self.rounds)
            for r in range(self.drawn, self.rounds):
                for table in everything[r]:
                    self._add_fixture(r + 1, list(table))
            self.drawn = self.rounds
            return True
        if self.drawn and not self.round_complete(self.drawn):
            return False  # swiss pairs from the previous round's results
        order = [row.team for row in self.table() if not row.withdrawn]
        met = formats.met_counts(f.teams for f in self.fixtures)
        tables, bye = formats.swiss_round(order, self.table_size, met, self.byes)
        self.drawn += 1
        if bye is not None:
            self.byes.append(bye)
        for table in tables:
            self._add_fixture(self.drawn, list(table))
        return True

    def _add_fixture(self, round_no: int, teams: list[str]) -> None:
        teams = [t for t in teams if t not in self.withdrawn]
        if len(teams) >= 2:
            self.fixtures.append(Fixture(round_no, teams))

    def admit_late(self, team: str) -> None:
        """A late team plays the remaining rounds: in a round robin a game
        against every active team (duels) or a seat at the remaining rounds'
        tables; in a swiss it is paired from the next round."""
        self.late[team] = "admitted"
        self.teams.append(team)
        if self.format != "round-robin":
            return
        if self.table_size == 2:
            start = max(self.drawn, 1)
            for i, other in enumerate(t for t in self.active if t != team):
                self.fixtures.append(Fixture(start + i, [other, team]))
            return
        # Tables: the smallest undone table of each remaining round takes it.
        by_round: dict[int, list[int]] = {}
        for i in self.pending():
            by_round.setdefault(self.fixtures[i].round, []).append(i)
        for idxs in by_round.values():
            smallest = min(idxs, key=lambda i: len(self.fixtures[i].teams))
            if len(self.fixtures[smallest].teams) < self.table_size:  # never above the table size
                self.fixtures[smallest].teams.append(team)

    @property
    def total_rounds(self) -> int:
        """The rounds the night has: the planned ones, or more once a late
        team's games were scheduled after them (a round robin gives it one
        game a round from the current one on: "round 9 of 5" otherwise)."""
        return max([self.rounds, self.drawn, *(f.round for f in self.fixtures)])

    def finished(self) -> bool:
        """Every round drawn and every fixture recorded."""
        return self.drawn >= self.rounds and not self.live and not self.pending()


def write(path: Path, body: dict[str, Any]) -> None:
    """A state's JSON into ``path``, atomically (a crash leaves the old file or the new)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as f:
        f.write(json.dumps(body, indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def plan(path: Path, fmt: str, rounds: int | None, teams: list[str], table_size: int = 2) -> tuple[State, list[str]]:
    """The tournament ``path`` holds (a restarted director carries on; teams
    registered since are late, for the organiser to admit or refuse), or a new
    one. Returns it and the late teams not decided yet."""
    saved = State.load(path)
    if saved is None:
        n = formats.default_rounds(fmt, len(teams), table_size)
        return State(fmt, rounds if rounds is not None else n, list(teams), table_size=table_size), []
    if saved.format != fmt or saved.table_size != table_size:
        from salvo.organiser.tournament.errors import TournamentError

        raise TournamentError(
            f"{path} holds another tournament ({saved.format}, tables of {saved.table_size}); use a new --state"
        )
    new = [t for t in teams if t not in saved.teams and t not in saved.late]
    for t in new:
        saved.late[t] = "pending"
    return saved, [t for t, s in saved.late.items() if s == "pending"]
