"""A tournament night: schedule two-player games onto arenas, collect each
game's stats, keep the standings.

The director runs the referee for its arenas in the same process (one MQTT
client per arena, as ``salvo referee --arenas`` does) and restricts each
arena's lobby to the two teams scheduled there. Teams learn where to play
from ``/tournament/assignments/<team>`` (retained JSON: ``{"round", "arena",
"opponent"}``, or ``{"done": true}``); ``salvo bot --tournament`` follows it.
Results come from what the referee publishes (``/<arena>/game/stats/...``),
standings are retained at ``/tournament/standings``. Everything decided is
kept in a JSON state file, so a restarted director carries on where it was
(a game in progress resumes from the referee's own journal).

Scoring: a win is 2 points, a draw 1 each, a loss 0; ties in the table are
broken by hits, then accuracy, then name.

No-shows: a game that has not started ``no_show_after`` seconds after its
assignment is forfeited. A team with its whole fleet approved by then wins
it; a team without one loses it (both lose when neither has one). The arena's
lobby is closed (everybody in it sent away) and the next game goes there.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from salvo.codec import dumps
from salvo.errors import Code, Illegal
from salvo.failures import Failure
from salvo.mqtt import Broker
from salvo.rules import SHIP_IDS
from salvo.topics import Topics, TournamentTopics
from salvo.watch import Recorder
from salvo.wire import PlayerStats, StatsSummary

if TYPE_CHECKING:
    from salvo.protocol import Arena
    from salvo.referee import Referee
    from salvo.teams import Registry

log = logging.getLogger("salvo.tournament")

FORMATS = ("round-robin", "swiss")


@dataclass
class GameResult:
    round: int
    arena: str
    players: list[str]
    winner: str | None
    stats: dict[str, dict[str, Any]]
    #: teams that lost by not turning up with a fleet (no game was played)
    forfeited: list[str] = field(default_factory=list)


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

    @property
    def accuracy(self) -> float:
        return round(self.hits / self.shots, 3) if self.shots else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy}


def standings(teams: list[str], results: list[GameResult]) -> list[Row]:
    rows = {t: Row(t) for t in teams}
    for r in results:
        for name in r.players:
            row = rows.setdefault(name, Row(name))
            row.played += 1
            s = r.stats.get(name, {})
            row.shots += int(s.get("shots", 0))
            row.hits += int(s.get("hits", 0))
            if name in r.forfeited:
                row.losses += 1
                row.forfeits += 1
            elif r.winner is None:
                row.draws += 1
                row.points += 1
            elif r.winner == name:
                row.wins += 1
                row.points += 2
            else:
                row.losses += 1
    return sorted(rows.values(), key=lambda x: (-x.points, -x.hits, -x.accuracy, x.team))


def round_robin(teams: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair once: the circle method, one bye per round when odd."""
    field_ = sorted(teams) + ([""] if len(teams) % 2 else [])
    n = len(field_)
    rounds = []
    for _ in range(n - 1):
        pairs = [(field_[i], field_[n - 1 - i]) for i in range(n // 2)]
        rounds.append([p for p in pairs if "" not in p])
        field_ = [field_[0], field_[-1], *field_[1:-1]]
    return rounds


def swiss_round(teams: list[str], results: list[GameResult]) -> list[tuple[str, str]]:
    """Pair neighbours in the standings, avoiding rematches where possible;
    the lowest-ranked team without a bye sits out when odd."""
    met = {frozenset(r.players) for r in results}
    order = [row.team for row in standings(teams, results)]
    if len(order) % 2:
        order.pop()
    pairs: list[tuple[str, str]] = []
    while order:
        a = order.pop(0)
        b = next((t for t in order if frozenset((a, t)) not in met), order[0])
        order.remove(b)
        pairs.append((a, b))
    return pairs


@dataclass
class State:
    """What the director has decided, persisted after every change."""

    format: str
    rounds: int
    teams: list[str]
    results: list[GameResult] = field(default_factory=list)
    #: round number -> its pairings, fixed once drawn
    schedule: dict[str, list[list[str]]] = field(default_factory=dict)

    @staticmethod
    def load(path: Path) -> State | None:
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        raw["results"] = [GameResult(**r) for r in raw.get("results", [])]
        return State(**raw)

    def save(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, path)

    def pairings(self, round_no: int) -> list[tuple[str, str]]:
        key = str(round_no)
        if key not in self.schedule:
            if self.format == "round-robin":
                drawn = round_robin(self.teams)[(round_no - 1) % max(1, len(self.teams) - 1 + len(self.teams) % 2)]
            else:
                drawn = swiss_round(self.teams, self.results)
            self.schedule[key] = [list(p) for p in drawn]
        return [(a, b) for a, b in self.schedule[key]]

    def played(self, round_no: int, pair: tuple[str, str]) -> bool:
        return any(r.round == round_no and set(r.players) == set(pair) for r in self.results)


class _ArenaWatch:
    """Follows one arena's public topics: its state and final stats."""

    def __init__(self, rec: Recorder, prefix: str) -> None:
        self.rec = rec
        self.t = Topics(prefix)

    def value(self, topic: str) -> bytes | None:
        msg = self.rec.latest(topic)
        return msg.payload if msg is not None else None

    def wait(self, pred: Callable[[], bool], stop: threading.Event, timeout: float | None = None) -> bool:
        """Until ``pred()`` holds (True), ``stop`` is set or ``timeout`` passes
        (False). Woken by every message; looks at ``stop`` twice a second."""
        end = None if timeout is None else time.monotonic() + timeout
        while not stop.is_set():
            left = 0.5 if end is None else min(0.5, end - time.monotonic())
            if left <= 0:
                return pred()
            if self.rec.wait_until(pred, left):
                return True
        return False


class Director:
    def __init__(
        self,
        *,
        broker: Broker,
        arenas: list[str],
        state: State,
        state_path: Path,
        roster: dict[str, set[str]],
        close_lobby: Callable[[str, str], bool] | None = None,
        no_show_after: float | None = None,
    ) -> None:
        self.broker = broker
        self.arenas = arenas
        self.state = state
        self.state_path = state_path
        #: arena -> the teams its lobby admits now (read by the arena threads)
        self.roster = roster
        #: (arena, reason) -> True when the arena's lobby was closed, False when
        #: its game had started after all; with ``no_show_after`` (seconds)
        self.close_lobby = close_lobby
        self.no_show_after = no_show_after
        self.stop = threading.Event()
        self._lock = threading.Lock()
        filters = [TournamentTopics.assignments(), TournamentTopics.marker]
        for a in arenas:
            t = Topics(a)
            filters += [t.state, t.players_list, t.stats_summary, t.stats_player("+"), t.approved("+", "+")]
        self.rec = Recorder(broker, filters, label="tournament", keep="latest")

    # -- publishing -------------------------------------------------------------------

    def publish(self, topic: str, body: object) -> None:
        # Waits for the PUBACK: the last ones ("done") must not be lost to close().
        self.rec.publish(topic, dumps(body), retain=True)

    def publish_standings(self) -> list[Row]:
        rows = standings(self.state.teams, self.state.results)
        self.publish(
            TournamentTopics.standings,
            {
                "format": self.state.format,
                "rounds": self.state.rounds,
                "games_played": len(self.state.results),
                "table": [r.as_json() for r in rows],
            },
        )
        return rows

    # -- running ----------------------------------------------------------------------

    def games(self) -> Iterator[tuple[int, tuple[str, str]]]:
        for round_no in range(1, self.state.rounds + 1):
            with self._lock:
                pairs = self.state.pairings(round_no)
                self.state.save(self.state_path)
            self.publish(TournamentTopics.schedule, {"round": round_no, "games": [list(p) for p in pairs]})
            # Swiss pairs the next round from this one's results: finish it first.
            yield from ((round_no, p) for p in pairs if not self.state.played(round_no, p))
            if self.state.format == "swiss":
                yield (round_no, ("", ""))  # a barrier, see run()

    def _adopt(self) -> dict[str, tuple[int, tuple[str, str]]]:
        """After a restart: games assigned before and not recorded yet go on
        in their arenas (the referee resumed them from its journal)."""
        token = os.urandom(8).hex()
        self.rec.client.publish(TournamentTopics.marker, token, qos=1)
        # Retained messages come before the marker: then every assignment is in.
        self.rec.wait(lambda m: m.topic == TournamentTopics.marker and m.payload == token.encode(), timeout=10)
        jobs: dict[str, dict[str, Any]] = {}
        for team in self.state.teams:
            msg = self.rec.latest(TournamentTopics.assignment(team))
            try:
                job = json.loads(msg.payload) if msg is not None and msg.payload else None
            except ValueError:
                continue
            if isinstance(job, dict) and job.get("arena") in self.arenas and isinstance(job.get("round"), int):
                jobs[team] = job
        adopted: dict[str, tuple[int, tuple[str, str]]] = {}
        for team, job in jobs.items():
            other = jobs.get(str(job.get("opponent")), {})
            round_no, arena = job["round"], job["arena"]
            same = other.get("arena") == arena and other.get("round") == round_no and other.get("opponent") == team
            scheduled = [p for p in self.state.schedule.get(str(round_no), []) if set(p) == {team, job["opponent"]}]
            if same and scheduled and arena not in adopted:
                pair = (scheduled[0][0], scheduled[0][1])
                if not self.state.played(round_no, pair):
                    adopted[arena] = (round_no, pair)
                    log.info("round %d: %s vs %s carries on in arena %s", round_no, *pair, arena)
        return adopted

    def adopt(self) -> dict[str, tuple[int, tuple[str, str]]]:
        """The games a restarted director carries on, with their teams let into
        their arenas at once: call before the referee takes messages, so that
        a join the broker delivers again right after the restart is admitted."""
        adopted = self._adopt()
        for arena, (_round, pair) in adopted.items():
            self.roster[arena] = set(pair)
        return adopted

    def run(self, adopted: dict[str, tuple[int, tuple[str, str]]] | None = None) -> list[Row]:
        self.publish_standings()
        busy: dict[str, threading.Thread] = {}
        adopted = self.adopt() if adopted is None else adopted
        for arena, (round_no, pair) in adopted.items():
            busy[arena] = threading.Thread(target=self.play, args=(arena, round_no, pair, True), daemon=True)
            busy[arena].start()
        going_on = {(r, frozenset(p)) for r, p in adopted.values()}
        # Whatever else is retained there is from an earlier run or evening
        # (a stale {"done": true} would send a team home at once).
        for team in self.state.teams:
            if not any(team in p for _r, p in adopted.values()):
                self.rec.publish(TournamentTopics.assignment(team), "", retain=True)
        free = [a for a in self.arenas if a not in adopted]
        for round_no, pair in self.games():
            if self.stop.is_set():
                break
            if (round_no, frozenset(pair)) in going_on:
                continue
            if pair == ("", ""):
                for t in list(busy.values()):
                    t.join()
                free, busy = list(self.arenas), {}
                continue
            while not free and not self.stop.is_set():
                for arena, t in list(busy.items()):
                    if not t.is_alive():
                        del busy[arena]
                        free.append(arena)
                time.sleep(0.05)
            arena = free.pop(0)
            t = threading.Thread(target=self.play, args=(arena, round_no, pair), daemon=True)
            busy[arena] = t
            t.start()
        for t in busy.values():
            t.join()
        for team in self.state.teams:
            self.publish(TournamentTopics.assignment(team), {"done": True})
        return self.publish_standings()

    def play(self, arena: str, round_no: int, pair: tuple[str, str], resumed: bool = False) -> None:
        watch = _ArenaWatch(self.rec, arena)
        t = watch.t
        if not resumed:
            # The arena must be back in its lobby, empty, before the next pair is let in.
            watch.wait(
                lambda: watch.value(t.state) == b"lobby" and watch.value(t.players_list) in (None, b"", b"[]"),
                self.stop,
            )
        self.roster[arena] = set(pair)
        if not resumed:
            for me, other in (pair, pair[::-1]):
                self.publish(TournamentTopics.assignment(me), {"round": round_no, "arena": arena, "opponent": other})
            log.info("round %d: %s vs %s in arena %s", round_no, pair[0], pair[1], arena)
        summary_topic = t.stats_summary

        def finished() -> bool:
            raw = watch.value(summary_topic)
            return bool(raw) and all(watch.value(t.stats_player(p)) for p in pair)

        if self.no_show_after is not None and self.close_lobby is not None:
            started = watch.wait(lambda: watch.value(t.state) != b"lobby" or finished(), self.stop, self.no_show_after)
            if self.stop.is_set():
                return
            if not started and self._forfeit(watch, arena, round_no, pair):
                return
        if not watch.wait(finished, self.stop):
            return
        summary = StatsSummary.model_validate_json(watch.value(summary_topic) or b"")
        stats = {p: PlayerStats.model_validate_json(watch.value(t.stats_player(p)) or b"").model_dump() for p in pair}
        result = GameResult(round_no, arena, list(pair), summary.winner or None, stats)
        rows = self._record(result)
        self.roster[arena] = set()
        log.info(
            "round %d in %s: winner %s | leader %s (%d pts)",
            round_no,
            arena,
            result.winner or "nobody",
            rows[0].team,
            rows[0].points,
        )
        # Wait for the referee's reset so the next game here starts clean.
        watch.wait(lambda: watch.value(t.state) == b"lobby", self.stop)

    def _record(self, result: GameResult) -> list[Row]:
        with self._lock:
            self.state.results.append(result)
            self.state.save(self.state_path)
            return self.publish_standings()

    def _forfeit(self, watch: _ArenaWatch, arena: str, round_no: int, pair: tuple[str, str]) -> bool:
        """The game never started: close the lobby and score a forfeit. False
        when the game started at the last moment (it is then played out)."""
        t = watch.t
        ready = [p for p in pair if all(watch.value(t.approved(p, ship)) == b"true" for ship in SHIP_IDS)]
        absent = [p for p in pair if p not in ready]
        self.roster[arena] = set()  # nobody else gets in while it closes
        reason = f"no-show: {' and '.join(absent)} not ready {self.no_show_after:g}s after the assignment"
        assert self.close_lobby is not None
        if not self.close_lobby(arena, reason):
            self.roster[arena] = set(pair)
            return False
        winner = ready[0] if len(ready) == 1 else None
        self._record(GameResult(round_no, arena, list(pair), winner, {}, forfeited=absent))
        log.warning("round %d in %s: %s; winner %s", round_no, arena, reason, winner or "nobody")
        return True

    def close(self) -> None:
        self.stop.set()
        self.rec.close()


def ranking_text(rows: list[Row]) -> str:
    lines = [f"{'#':>2}  {'team':<20} {'P':>3} {'W':>3} {'D':>3} {'L':>3} {'pts':>4} {'hits':>5} {'acc':>6}"]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"{i:>2}  {r.team:<20} {r.played:>3} {r.wins:>3} {r.draws:>3} {r.losses:>3} "
            f"{r.points:>4} {r.hits:>5} {r.accuracy:>6.1%}"
        )
    return "\n".join(lines)


def follow(
    broker: Broker,
    name: str,
    secret: str,
    strategy_factory: Callable[[], Any],
    *,
    on_game: Callable[[Any], None] | None = None,
    username: str | None = None,
    password: str | None = None,
) -> int:
    """Play wherever ``/tournament/assignments/<name>`` says, game after game,
    until it says done. Returns the number of games played."""
    from salvo.client import JoinRefused, LobbyClosed, SalvoClient

    topic = TournamentTopics.assignment(name)
    rec = Recorder(broker, [topic], label=f"follow-{name}")
    played: set[tuple[int, str]] = set()
    try:
        while True:
            msg = rec.wait(lambda m: _fresh(m.payload, played), timeout=24 * 3600, what="an assignment")
            job = json.loads(msg.payload)
            if job.get("done"):
                return len(played)
            played.add((job["round"], job["arena"]))
            client = SalvoClient(
                name, secret, broker, prefix=job["arena"], username=username, password=password
            ).connect()
            try:
                client.play(strategy_factory(), games=1, on_game=on_game)
            except LobbyClosed:
                log.warning("%s: the game in %s was called off (no-show); waiting for the next", name, job["arena"])
            except JoinRefused as exc:  # e.g. came too late: the game was forfeited meanwhile
                log.warning("%s: not admitted to %s: %s; waiting for the next", name, job["arena"], exc)
            finally:
                client.close()
    finally:
        rec.close()


def _fresh(payload: bytes, played: set[tuple[int, str]]) -> bool:
    try:
        job = json.loads(payload)
    except ValueError:
        return False
    if not isinstance(job, dict):
        return False
    return bool(job.get("done")) or (job.get("round"), job.get("arena")) not in played


# -- a night: who plays, for how many rounds, and running it ----------------------------------


class TournamentError(Failure):
    """The tournament cannot start or carry on: too few teams, a state file
    of another tournament, a broker out of reach."""


def entrants(registry: Registry, source: Path) -> list[str]:
    """The registered teams, in name order; a tournament needs two."""
    teams = sorted(registry.teams)
    if len(teams) < 2:
        raise TournamentError(f"a tournament needs at least two registered teams; {source} has {len(teams)}")
    return teams


def default_rounds(fmt: str, teams: int) -> int:
    """A round robin plays everybody once (a bye each round for an odd
    count); a swiss tournament three rounds."""
    return (teams - 1 + teams % 2) if fmt == "round-robin" else 3


def plan(path: Path, fmt: str, rounds: int | None, teams: list[str]) -> State:
    """What ``path`` holds, when it is this tournament (a restarted director
    carries on), or a new one of ``rounds`` (default: :func:`default_rounds`)."""
    saved = State.load(path)
    if saved is not None and (saved.format != fmt or saved.teams != teams):
        raise TournamentError(
            f"{path} holds another tournament ({saved.format}, {len(saved.teams)} teams); use a new --state"
        )
    return saved or State(fmt, rounds if rounds is not None else default_rounds(fmt, len(teams)), teams)


def no_show_error(no_show_after: float, placement_timeout: float) -> str | None:
    """Why a no-show deadline (0: none) cannot be used with this placement
    timeout, or None."""
    if no_show_after and no_show_after <= placement_timeout:
        return f"must be longer than --placement-timeout ({placement_timeout:g}s): a slow placer is not a no-show"
    return None


def restrict_lobbies(arenas: list[Arena], registry: Registry) -> dict[str, set[str]]:
    """Let into each arena only the teams scheduled there now, with their
    registered secret. The roster returned (arena -> those teams) is the
    director's to change; the arenas read it at every join."""
    roster: dict[str, set[str]] = {arena.topics.prefix: set() for arena in arenas}
    for arena in arenas:
        p = arena.topics.prefix

        def admit(name: str, secret: str, p: str = p) -> bool | None:
            verified = registry.admit(name, secret)
            if name not in roster[p]:
                raise Illegal(
                    Code.NOT_REGISTERED,
                    f"{name!r} is not scheduled in arena {p!r} now; see /tournament/assignments/{name}",
                )
            return verified

        arena.admit = admit
    return roster


def hold(
    director: Director,
    service: Referee,
    *,
    on_started: Callable[[], object] = lambda: None,
    connect_timeout: float = 30.0,
) -> list[Row] | None:
    """Run the night with its referee until every game is played: the final
    standings; None when it was stopped first (the same state file carries
    on). ``on_started`` runs once the referee is connected."""
    adopted = director.adopt()  # before the referee reads the joins the broker kept for it
    service.start()
    if not service.wait_connected(connect_timeout):
        service.stop()
        director.close()
        raise TournamentError(f"cannot reach the broker at {director.broker.url}")
    on_started()
    rows: list[Row] = []
    try:
        rows = director.run(adopted)
    except KeyboardInterrupt:
        director.stop.set()
    finally:
        stopped = director.stop.is_set()
        director.close()
        service.stop()
    return None if stopped else rows
