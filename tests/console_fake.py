"""An in-memory director implementing :class:`salvo.organiser.tournament.controls.Controls`
for the console's tests: a tournament night in one dict, the actions applied
to it (and refused as the director would), every applied one audited."""

from __future__ import annotations

import copy
import csv
import io
import threading
import time
from typing import Any

from salvo.organiser.tournament.controls import ACTIONS, ControlError

TEAMS = ["ada", "bletchley", "colossus", "dijkstra", "enigma", "fortran", "grace", "hopper"]


def _standing(rank: int, team: str, wins: int, losses: int, hits: int, shots: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "team": team,
        "played": wins + losses,
        "wins": wins,
        "draws": 0,
        "losses": losses,
        "forfeits": 0,
        "points": 2 * wins,
        "buchholz": 0,
        "hits": hits,
        "shots": shots,
        "accuracy": round(hits / shots, 3) if shots else 0.0,
        "withdrawn": False,
    }


class FakeDirector:
    """Round 3 of a round-robin of eight teams, four arenas."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        now = time.time()
        self.applied: list[tuple[str, dict[str, Any], str]] = []
        self.state: dict[str, Any] = {
            "tournament": {
                "format": "round-robin",
                "table_size": 2,
                "rounds": 7,
                "round": 3,
                "games_total": 28,
                "games_played": 8,
                "games_left": 20,
                "paused": False,
                "done": False,
                "leader": "ada",
            },
            "arenas": [
                self._arena("arena1", "turn", ["ada", "bletchley"], now - 95, turn=12, current="ada"),
                self._arena("arena2", "placement", ["colossus", "dijkstra"], now - 20),
                self._arena("arena3", "turn", ["enigma", "fortran"], now - 130, turn=17, current="fortran"),
                self._arena("arena4", "idle", [], None),
            ],
            "standings": [
                _standing(1, "ada", 2, 0, 41, 88),
                _standing(2, "hopper", 2, 0, 38, 90),
                _standing(3, "enigma", 1, 1, 35, 97),
                _standing(4, "colossus", 1, 1, 33, 101),
                _standing(5, "bletchley", 1, 1, 30, 104),
                _standing(6, "dijkstra", 1, 1, 29, 99),
                _standing(7, "fortran", 0, 2, 22, 120),
                _standing(8, "grace", 0, 2, 20, 118),
            ],
            "games": [
                self._game(i, 1 + i // 4, f"arena{1 + i % 4}", pair, winner)
                for i, (pair, winner) in enumerate(
                    [
                        (["ada", "hopper"], "ada"),
                        (["bletchley", "grace"], "bletchley"),
                        (["colossus", "fortran"], "colossus"),
                        (["dijkstra", "enigma"], "enigma"),
                        (["ada", "grace"], "ada"),
                        (["hopper", "fortran"], "hopper"),
                        (["bletchley", "dijkstra"], "dijkstra"),
                        (["colossus", "enigma"], "colossus"),
                    ]
                )
            ],
            "pending": [{"round": 3, "teams": ["grace", "hopper"]}, {"round": 4, "teams": ["ada", "colossus"]}],
            "late": [{"team": "lovelace", "status": "pending"}],
            "audit": [],
        }

    @staticmethod
    def _arena(
        name: str,
        state: str,
        teams: list[str],
        since: float | None,
        *,
        turn: int | None = None,
        current: str | None = None,
    ) -> dict[str, Any]:
        return {
            "arena": name,
            "state": state,
            "round": 3 if teams else None,
            "teams": teams,
            "since": since,
            "paused": False,
            "turn": turn,
            "current": current,
        }

    @staticmethod
    def _game(index: int, rnd: int, arena: str, teams: list[str], winner: str) -> dict[str, Any]:
        return {
            "game": index,
            "round": rnd,
            "arena": arena,
            "teams": teams,
            "status": "played",
            "winner": winner,
            "forfeited": [],
            "turns": 30 + 3 * index,
            "duration_s": 40.0 + 7.5 * index,
            "journal_game": index + 1,
        }

    # -- Controls ---------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.state)

    def apply(self, action: str, args: dict[str, Any], by: str) -> dict[str, Any]:
        if action not in ACTIONS:
            raise ControlError("unknown_action", action)
        with self.lock:
            getattr(self, "_" + action.replace("-", "_"))(**args)
            entry = {"at": time.time(), "by": by, "action": action, "args": args, "result": "ok"}
            self.state["audit"].append(entry)
            self.applied.append((action, args, by))
            return entry

    def export_json(self) -> dict[str, Any]:
        with self.lock:
            return {"games": copy.deepcopy(self.state["games"]), "teams": copy.deepcopy(self.state["standings"])}

    def export_csv(self, what: str) -> str:
        rows = self.export_json()["games" if what == "games" else "teams"]
        out = io.StringIO()
        fields = [k for k in rows[0] if not isinstance(rows[0][k], list | dict)]
        writer = csv.DictWriter(out, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    # -- the actions (under the lock) --------------------------------------

    def _find_arena(self, arena: str) -> dict[str, Any]:
        for a in self.state["arenas"]:
            if a["arena"] == arena:
                if a["state"] not in ("lobby", "placement", "turn"):
                    raise ControlError("no_game", f"no game is running in {arena}")
                found: dict[str, Any] = a
                return found
        raise ControlError("no-arena", f"there is no arena {arena}")

    def _find_game(self, game: int) -> dict[str, Any]:
        if not 0 <= game < len(self.state["games"]):
            raise ControlError("no_game", f"there is no game {game}")
        found: dict[str, Any] = self.state["games"][game]
        return found

    def _pause(self) -> None:
        if self.state["tournament"]["paused"]:
            raise ControlError("already_paused", "the tournament is already paused")
        self.state["tournament"]["paused"] = True

    def _resume(self) -> None:
        if not self.state["tournament"]["paused"]:
            raise ControlError("not_paused", "the tournament is not paused")
        self.state["tournament"]["paused"] = False

    def _pause_game(self, arena: str) -> None:
        a = self._find_arena(arena)
        if a["paused"]:
            raise ControlError("already_paused", f"the game in {arena} is already paused")
        a["paused"] = True

    def _resume_game(self, arena: str) -> None:
        a = self._find_arena(arena)
        if not a["paused"]:
            raise ControlError("not_paused", f"the game in {arena} is not paused")
        a["paused"] = False

    def _extra_time(self, arena: str, seconds: float) -> None:
        if self._find_arena(arena)["paused"]:
            raise ControlError("paused", f"the clock in {arena} is stopped: resume the game first")

    def _abort_game(self, arena: str, reason: str = "") -> None:
        a = self._find_arena(arena)
        self.state["pending"].insert(0, {"round": a["round"], "teams": a["teams"]})
        a.update(state="idle", teams=[], round=None, turn=None, current=None, since=None, paused=False)

    def _void_game(self, game: int, reason: str = "") -> None:
        self._find_game(game)["status"] = "void"

    def _override(self, game: int, winner: str, reason: str = "") -> None:
        g = self._find_game(game)
        if winner and winner not in g["teams"]:
            raise ControlError("not-in-game", f"{winner} did not play game {game}")
        g.update(status="overridden", winner=winner or None)

    def _withdraw(self, team: str, reason: str = "") -> None:
        for row in self.state["standings"]:
            if row["team"] == team:
                if row["withdrawn"]:
                    raise ControlError("withdrawn", f"{team} is already withdrawn")
                row["withdrawn"] = True
                return
        raise ControlError("no-team", f"there is no team {team}")

    def _late(self, team: str, to: str) -> None:
        for late in self.state["late"]:
            if late["team"] == team and late["status"] == "pending":
                late["status"] = to
                return
        raise ControlError("not_late", f"{team} is not waiting to join")

    def _admit_late(self, team: str) -> None:
        self._late(team, "admitted")

    def _refuse_late(self, team: str) -> None:
        self._late(team, "refused")
