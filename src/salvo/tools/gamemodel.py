"""The chaos harness's verdict on what a referee published for one game.

:class:`GameModel` plays the game on the shared oracle
(:mod:`salvo.tools.oracle`, written from the protocol, not from the engine):
it knows every fleet, plans every salvo, and predicts every published result:
turn announcements, hits, salvo records, sinks, defeats, the winner and the
stats. :func:`check` then judges a recorded message log against it.
``salvo stress chaos`` (:mod:`salvo.tools.chaos`) drives it under fault injection.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from salvo.net.watch import Msg
from salvo.spec.topics import Outbound, Topics
from salvo.tools.oracle import SHIPS, Cell, Fleet, Oracle, random_fleet

__all__ = ["SHIPS", "GameModel", "Violation", "check", "random_fleet"]


@dataclass(frozen=True)
class Violation:
    kind: str  # lost | undone | wrong | error | refusal | touched | stalled
    text: str
    at: int  # index in the watcher's log the violation was seen at (-1: none)


class GameModel(Oracle):
    """What the referee must conclude, for a game whose players joined in
    ``joined`` order and completed their fleets in ``order`` (the play order):
    the oracle's game, and what must be published turn by turn."""

    def __init__(self, fleets: dict[str, Fleet], joined: list[str], order: list[str]):
        super().__init__(fleets, order)
        self.joined = joined
        self.turn = 0
        self.current = ""
        # Predictions, by turn
        self.turns_announced: dict[int, dict[str, Any]] = {}
        self.salvos: dict[int, dict[str, Any]] = {}
        self.planned: dict[int, tuple[str, list[Cell]]] = {}

    def start(self, first: str) -> None:
        """Turn 1 goes to ``first`` (the referee draws it at random)."""
        self._announce(first)

    def _announce(self, player: str) -> None:
        self.turn += 1
        self.current = player
        self.turns_announced[self.turn] = {"turn": self.turn, "player": player, "shots": self.afloat(player)}

    def plan(self, rng: random.Random) -> tuple[str, list[Cell]]:
        """The current player's salvo: one target still in, mostly cells of its
        ships not hit yet, a cell hit before now and then, the rest misses."""
        allowed = self.turns_announced[self.turn]["shots"]
        target = rng.choice([n for n in self.order if n != self.current and n not in self.defeated])
        ship_cells = self.ships[target]
        todo = sorted(c for c in ship_cells if c not in self.hit[target])
        k = min(len(todo), max(1, allowed - rng.choice((0, 1, 1, 2))))
        cells = rng.sample(todo, k)
        done = sorted(self.hit[target])
        if done and len(cells) < allowed and rng.random() < 0.3:
            cells.append(rng.choice(done))  # a hit all the same (spec 6)
        misses = [(x, y) for y in range(10) for x in range(10) if (x, y) not in ship_cells]
        cells += rng.sample(misses, allowed - len(cells))
        rng.shuffle(cells)
        return target, cells

    def apply(self, target: str, cells: list[Cell]) -> None:
        """The salvo is fired: predict its results and what comes next."""
        shooter, n = self.current, self.turn
        self.planned[n] = (target, list(cells))
        outcome = self.fire(shooter, n, [(target, c) for c in cells])
        self.salvos[n] = {"turn": n, "player": shooter, "shots": len(cells), "hits": outcome.hits}
        if self.over:
            self.current = ""
            return
        self._announce(self.next_after(shooter))


def check(
    model: GameModel,
    log: Sequence[Msg],
    start: int,
    end: int,
    prefix: str,
    *,
    complete: bool = True,
    loose: frozenset[int] = frozenset(),
    unordered: bool = False,
) -> list[Violation]:
    """Judge ``log[start:end]`` (one game, as a watcher of ``/<prefix>/#``
    recorded it) against ``model``. Republished copies must equal the first;
    nothing may go back or be cleared before the reset; no error report is
    due (the teams send only valid messages; probes carry a request id
    ``probe-...``). With ``complete`` (the game was played to its end) every
    prediction must have been published. In ``loose`` turns (a broker without
    persistence restarted) hits may be missing and land in another order.
    With ``unordered`` every shot must still have its hit, but a salvo's
    shots may be numbered in another order than they were sent (a NATS
    cluster redelivers what a lost node had in flight in its own order)."""
    salvo = Topics(prefix).salvo
    salvos = [i for i in range(start, end) if log[i].topic == salvo]
    judge = _Judge(model, log, prefix, loose, salvos, unordered)
    for i in range(start, end):
        try:
            judge.see(i, log[i])
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            judge.bad("wrong", f"unreadable {log[i].topic} {log[i].text[:80]!r}: {exc!r}", i)
    if complete:
        judge.out += _missing(model, judge.first, judge.hit_seen, loose, judge.t, end)
    return judge.out


class _Judge:
    """The state of :func:`check` along the log."""

    def __init__(
        self,
        model: GameModel,
        log: Sequence[Msg],
        prefix: str,
        loose: frozenset[int],
        salvos: list[int],
        unordered: bool,
    ):
        self.model, self.log, self.loose, self.salvo_at, self.unordered = model, log, loose, salvos, unordered
        self.t = Topics(prefix)
        self.out: list[Violation] = []
        self.state, self.game_id, self.reset_at = "lobby", "", float("inf")  # a game starts in the lobby
        self.max_turn = self.max_salvo = self.max_players = 0
        self.turn_player = ""
        self.hit_seen: dict[tuple[str, int, int], bytes] = {}
        self.used: dict[int, set[Cell]] = {}
        self.first: dict[str, int] = {}  # where each result was first seen
        self.latest: dict[str, str] = {}  # each retained topic's last non-empty value
        self.last_hits = ""  # the last /game/hits that had its salvo record

    def bad(self, kind: str, text: str, i: int) -> None:
        self.out.append(Violation(kind, text, i))

    def see(self, i: int, m: Msg) -> None:
        t, model, bad = self.t, self.model, self.bad
        topic, text = m.topic, m.text
        # the referee's own, not the game's; and the harness's marker
        own = (t.sweep, t.probe, t.lease, t.server, t.pubkey, t.version, t.tool_marker("chaos"))
        if t.parse_inbound(topic) is not None or topic in own:
            return
        route = t.parse_outbound(topic)
        kind, name = (route.kind, route.name) if route is not None else (None, "")
        if topic == t.errors:
            if not str(json.loads(text).get("request_id", "")).startswith("probe-"):
                bad("error", f"error report on {topic}: {text}", i)
            return
        if kind in (Outbound.PLAYER_ERROR, Outbound.SHIP_ERROR):
            bad("error", f"error report to a team on {topic}: {text}", i)
            return
        if not m.payload:
            if topic == t.hits or kind is Outbound.HIT:
                bad("wrong", f"empty {topic}", i)
            elif topic in self.latest and not self._resetting(m) and not (topic == t.current and model.over):
                bad("undone", f"{topic} cleared (was {self.latest[topic]!r}) before the reset", i)
            self.latest.pop(topic, None)
            return
        if topic != t.hits:
            self.first.setdefault(topic, i)
        if topic == t.state:
            ok = {"lobby": {"lobby", "turn"}, "turn": {"turn", "over"}}
            reset = text == "lobby" and self._resetting(m)
            if text not in ok.get(self.state, {"over"}) and not reset:
                bad("undone", f"state went from {self.state} to {text}", i)
            self.state = text
        elif topic == t.game_id:
            if self.game_id and text != self.game_id and not self._resetting(m):
                bad("wrong", f"game id changed from {self.game_id} to {text} before the reset", i)
            # the next game's id once the reset is due: a restart publishes it again after the lobby
            self.game_id = text if self._resetting(m) else self.game_id or text
        elif topic == t.deadline:
            if json.loads(text).get("phase") == "reset":
                self.reset_at = float(json.loads(text)["at"])
        elif topic in (t.turn, t.salvo):
            self._turn_or_salvo(i, m)
        elif topic == t.current:
            if text != self.turn_player:
                bad("wrong", f"current {text!r} while the last turn announced is {self.turn_player!r}'s", i)
        elif topic == t.hits:
            at = next((k for k in self.salvo_at if k > i and self.log[k].payload), None)
            after = self.log[at].json() if at is not None else None
            # A restart publishes again what the broker may not have had, and
            # only the last value of a retained topic (the salvo record): a
            # /game/hits with another after it before the record was superseded.
            superseded = at is not None and any(self.log[k].topic == t.hits for k in range(i + 1, at))
            if after is None and self._resetting(m) and text == self.last_hits:
                return  # the last salvo's, published again by a restart after its record was cleared
            if after is None or (str(after["hits"]) != text and not superseded):
                bad("wrong", f"/game/hits {text} but the next salvo record says {after}", i)
            else:
                self.first.setdefault(f"hits{after['turn']}", i)
                self.last_hits = text
        elif kind is Outbound.HIT:
            self._hit(i, m, name)
        elif route is not None and kind in (Outbound.SUNK, Outbound.DEFEATED):
            n = model.sunk_in.get((name, route.ship)) if kind is Outbound.SUNK else model.defeated.get(name)
            if text != "true" or n is None:
                bad("wrong", f"{topic} = {text}: the model has it afloat", i)
            elif f"salvo{n}" not in self.first:
                bad("wrong", f"{topic} announced before the salvo of turn {n} ended", i)
        elif topic == t.winner:
            if not model.over or text != model.winner:
                bad("wrong", f"winner {text!r}, the model says {model.winner!r} (over: {model.over})", i)
        elif topic == t.stats_summary:
            j = m.json()
            duration = j.pop("duration_s", None)
            if not model.over or j != model.summary() or not isinstance(duration, (int, float)) or duration < 0:
                bad("wrong", f"stats {text}, the model says {model.summary()}", i)
        elif kind is Outbound.STATS_PLAYER:
            if not model.over or name not in model.order or m.json() != model.stats(name):
                bad("wrong", f"stats of {name}: {text}, the model says {model.over and model.stats(name)}", i)
        elif topic in (t.players_list, t.players_count):
            self._players(i, m)
        elif kind is Outbound.APPROVED:
            if name not in model.joined or text not in ("true", "false"):
                bad("wrong", f"{topic} = {text}", i)
            elif text == "false" and self.latest.get(topic) == "true":
                bad("undone", f"{topic} went back to false", i)
        self.latest[topic] = text

    def _resetting(self, m: Msg) -> bool:
        """The game is over and its reset is due (a tenth of a second's leeway)."""
        return self.state == "over" and m.at >= self.reset_at - 0.1

    def _turn_or_salvo(self, i: int, m: Msg) -> None:
        j, turn = m.json(), m.topic == self.t.turn
        want = (self.model.turns_announced if turn else self.model.salvos).get(j.get("turn"))
        what, highest = ("turn", self.max_turn) if turn else ("salvo", self.max_salvo)
        if j != want:
            self.bad("wrong", f"{what} {m.text}, the model says {want}", i)
        elif j["turn"] < highest:
            self.bad("undone", f"{what} went back from turn {highest} to {j['turn']}", i)
        self.first.setdefault(f"{what}{j.get('turn')}", i)
        if turn:
            self.max_turn, self.turn_player = max(self.max_turn, j["turn"]), j["player"]
        else:
            self.max_salvo = max(self.max_salvo, j["turn"])

    def _hit(self, i: int, m: Msg, target: str) -> None:
        j = m.json()
        key = (target, j["turn"], j["shot"])
        if key in self.hit_seen:
            if self.hit_seen[key] != m.payload:
                self.bad("wrong", f"hit {key} published again differently: {m.text} (first {self.hit_seen[key]!r})", i)
            return
        self.hit_seen[key] = m.payload
        plan = self.model.planned.get(j["turn"])
        cell = (j["x"], j["y"])
        taken = self.used.setdefault(j["turn"], set())
        if plan is None or plan[0] != target or cell not in plan[1] or cell in taken:
            self.bad("wrong", f"hit {m.text} on {target}: the model planned {plan}", i)
        elif j["turn"] not in self.loose and not self.unordered and plan[1][j["shot"] - 1] != cell:
            self.bad("wrong", f"hit {m.text}: shot {j['shot']} of turn {j['turn']} was {plan[1][j['shot'] - 1]}", i)
        taken.add(cell)

    def _players(self, i: int, m: Msg) -> None:
        model, lobby = self.model, self.state == "lobby"
        if m.topic == self.t.players_count:
            if int(m.text) > len(model.joined) or (not lobby and int(m.text) != len(model.order)):
                self.bad("wrong", f"players count {m.text}", i)
            return
        names = m.json()
        if names not in (model.joined[: len(names)], model.order) or (not lobby and names != model.order):
            self.bad("wrong", f"players {names} (joined {model.joined}, play order {model.order})", i)
        elif lobby and len(names) < self.max_players:
            self.bad("undone", f"players list shrank to {names}", i)
        self.max_players = max(self.max_players, len(names))


def _missing(
    model: GameModel,
    first: dict[str, int],
    hit_seen: dict[tuple[str, int, int], bytes],
    loose: frozenset[int],
    t: Topics,
    end: int,
) -> list[Violation]:
    """Every prediction of a game played to its end must have been published."""
    want = [f"turn{n}" for n in model.turns_announced] + [f"salvo{n}" for n in model.salvos]
    want += [t.sunk(o, s) for o, s in model.sunk_in] + [t.defeated(n) for n in model.defeated]
    want += [t.winner, t.stats_summary] + [t.stats_player(n) for n in model.order]
    lost = [Violation("lost", f"never published: {w}", end) for w in want if w not in first]
    for n, (target, cells) in model.planned.items():
        if n in loose:
            continue
        lost += [
            Violation("lost", f"never published: hit {k} of turn {n} on {target}", end)
            for k in range(1, len(cells) + 1)
            if (target, n, k) not in hit_seen
        ]
        if f"hits{n}" not in first:
            lost.append(Violation("lost", f"never published: /game/hits of turn {n}", end))
    if model.over and not model.winner:
        lost.append(Violation("wrong", "the model ended without a winner", end))
    return lost
