"""The conformance suite: drives scripted teams through two whole games on a
live referee and judges only what the referee publishes.

Game 1 covers presence, joining, placing, the deadline start, turns, firing,
salvo ends, defeats, the end and the reset. Game 2 covers the lobby that
stays open, the immediate start, garbage input, and timeouts up to a drop.

What the referee under test needs (it is checked, see ``settings.timeouts``):
min-players 2, placement timeout 1-10 s, turn timeout up to 5 s, reset-after
up to 10 s, max-players up to 30, and, on a broker with access control, a
login that reads everything (``--referee-user``) plus three team logins.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import string
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from salvo import crypto
from salvo.conformance.cases import CASES, Case
from salvo.conformance.harness import Msg, Recorder, Team, team_key, wait_until
from salvo.mqtt import Broker
from salvo.rules import BOARD_SIZE, FLEET, SHIP_IDS, Orientation, Placement, cell
from salvo.topics import Topics, matches

RECOMMENDED = "salvo referee --placement-timeout 3 --turn-timeout 1.5 --reset-after 1 --max-players 6"
H, V = Orientation.HORIZONTAL, Orientation.VERTICAL
QUIET = 0.6  # seconds of silence that make "nothing happened" believable
GAME2_CASES = {
    "start.too_few",
    "start.all_ready",
    "robust.garbage",
    "robust.continues",
    "timeout.partial",
    "timeout.drop",
}


class CaseFailed(AssertionError):
    pass


class Abort(Exception):
    """A step the rest of a game depends on failed."""


def expect(cond: object, message: str) -> None:
    if not cond:
        raise CaseFailed(message)


@dataclass
class Options:
    broker: Broker
    prefix: str = ""
    referee_login: tuple[str, str] | None = None  # reads everything on an ACL'd broker
    teams: list[tuple[str, str]] = field(default_factory=list)  # (name, MQTT password)
    groups: set[str] | None = None  # only these case groups


@dataclass
class Result:
    case: Case
    status: str  # "pass" | "fail" | "skip"
    detail: str = ""

    def line(self) -> str:
        mark = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[self.status]
        text = f"{mark}  §{self.case.section:<4} {self.case.id:<26} {self.case.title}"
        return text + (f"\n      -> {self.detail}" if self.detail and self.status != "pass" else "")


def read_team_credentials(text: str) -> list[tuple[str, str]]:
    """``name:password`` per line (``#`` comments), or a JSON object."""
    stripped = text.strip()
    if stripped.startswith("{"):
        data = json.loads(stripped)
        return [(str(k), str(v)) for k, v in data.items()]
    pairs = []
    for raw in stripped.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, password = line.partition(":")
            pairs.append((name.strip(), password.strip()))
    return pairs


# -- what must happen: the suite's own model of a game ---------------------------------


@dataclass
class Board:
    fleet: dict[str, Placement]
    hit: set[int] = field(default_factory=set)
    sunk: list[str] = field(default_factory=list)

    def ships(self) -> dict[int, str]:
        return {c: s for s, p in self.fleet.items() for c in p.cells(FLEET[s])}

    def empty_cells(self) -> list[tuple[int, int]]:
        taken = self.ships()
        return [(c % BOARD_SIZE, c // BOARD_SIZE) for c in range(BOARD_SIZE**2) if c not in taken]

    def unhit_ship_cells(self) -> list[tuple[int, int]]:
        return [(c % 10, c // 10) for s in SHIP_IDS for c in self.fleet[s].cells(FLEET[s]) if c not in self.hit]


@dataclass
class Model:
    boards: dict[str, Board]
    order: list[str] = field(default_factory=list)
    defeated: dict[str, int] = field(default_factory=dict)
    shots: dict[str, int] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    credits: dict[str, int] = field(default_factory=dict)

    def afloat(self, name: str) -> int:
        return len(FLEET) - len(self.boards[name].sunk)

    def next_after(self, name: str) -> str:
        i = self.order.index(name)
        return next(n for n in self.order[i + 1 :] + self.order[: i + 1] if n not in self.defeated)

    def apply(
        self, shooter: str, turn: int, shots: list[tuple[str, int, int]]
    ) -> tuple[int, set[tuple[str, str]], set[str]]:
        hits = 0
        for target, x, y in shots:
            b = self.boards[target]
            if cell(x, y) in b.ships():
                hits += 1
                b.hit.add(cell(x, y))
        self.shots[shooter] = self.shots.get(shooter, 0) + len(shots)
        self.hits[shooter] = self.hits.get(shooter, 0) + hits
        sunk = set()
        for owner in self.order:
            b = self.boards[owner]
            for ship in SHIP_IDS:
                if ship not in b.sunk and set(b.fleet[ship].cells(FLEET[ship])) <= b.hit:
                    b.sunk.append(ship)
                    sunk.add((owner, ship))
                    if owner != shooter:
                        self.credits[shooter] = self.credits.get(shooter, 0) + 1
        newly = {n for n in self.order if n not in self.defeated and not self.afloat(n)}
        for n in newly:
            self.defeated[n] = turn
        return hits, sunk, newly


def field_is(topic: str, key: str, value: object) -> Callable[[Msg], bool]:
    """A message on ``topic`` whose JSON has ``key`` == ``value``."""

    def pred(m: Msg) -> bool:
        return m.topic == topic and bool(m.payload) and m.json().get(key) == value

    return pred


def on_topic(topic: str) -> Callable[[Msg], bool]:
    return lambda m: m.topic == topic


def fleet_rows(y0: int) -> dict[str, Placement]:
    return {s: Placement(0, y0 + i, H) for i, s in enumerate(SHIP_IDS)}


def fleet_columns(x0: int) -> dict[str, Placement]:
    return {s: Placement(x0 + i, 0, V) for i, s in enumerate(SHIP_IDS)}


# -- the runner --------------------------------------------------------------------------


class Suite:
    def __init__(self, options: Options, report: Callable[[Result], None] | None = None) -> None:
        self.o = options
        self.t = Topics(options.prefix)
        self.report = report or (lambda r: None)
        self.results: dict[str, Result] = {}
        self._soft: dict[str, list[str]] = {}
        self._conns: list[Recorder] = []
        self.secrets: set[str] = set()
        self.learned: dict[str, float] = {}
        self.pubkey: str | None = None
        self.dummies: list[str] = []
        self.tag = "".join(random.choice(string.ascii_lowercase) for _ in range(4))

    # -- bookkeeping ----------------------------------------------------------------

    def _record(self, case_id: str, status: str, detail: str = "") -> None:
        if case_id in self.results:
            return
        result = Result(CASES[case_id], status, detail)
        self.results[case_id] = result
        self.report(result)

    def wanted(self, case_id: str) -> bool:
        return self.o.groups is None or CASES[case_id].group in self.o.groups

    @contextlib.contextmanager
    def case(self, case_id: str) -> Iterator[None]:
        """Run a check: it passes unless it raises."""
        try:
            yield
        except (AssertionError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as exc:
            self._record(case_id, "fail", str(exc) or type(exc).__name__)
        else:
            self._record(case_id, "pass")

    def note(self, case_id: str, ok: bool, detail: str) -> None:
        """A check made many times; its case fails at the first violation."""
        failures = self._soft.setdefault(case_id, [])
        if not ok:
            failures.append(detail)

    def settle(self, *case_ids: str) -> None:
        for case_id in case_ids:
            failures = self._soft.get(case_id)
            if failures is None:
                continue
            self._record(case_id, "fail" if failures else "pass", failures[0] if failures else "")

    def skip(self, case_id: str, why: str) -> None:
        self._record(case_id, "skip", why)

    # -- connections ------------------------------------------------------------------

    def _login(self, user: str | None, password: str | None) -> Broker:
        return Broker(
            host=self.o.broker.host,
            port=self.o.broker.port,
            username=user,
            password=password,
            transport=self.o.broker.transport,
            tls=self.o.broker.tls,
            path=self.o.broker.path,
            mqtt5=self.o.broker.mqtt5,
        )

    def _connect(self, broker: Broker, filters: list[str] | tuple[str, ...], label: str) -> Recorder:
        rec = Recorder(broker, filters, label=f"conformance-{label}")
        self._conns.append(rec)
        return rec

    def _setup(self) -> None:
        o = self.o
        observer_login = self._login(*o.referee_login) if o.referee_login else o.broker
        filters = [self.t.everything()]
        if o.prefix:  # to see anything the referee publishes outside its arena
            filters += ["/game/#", "/players/#"]
        self.obs = self._connect(observer_login, filters, "observer")
        self.acl = len(o.teams) >= 3
        if self.acl:
            logins = [(name, self._login(name, pw)) for name, pw in o.teams[:3]]
        else:
            logins = [(f"conf{self.tag}{s}", observer_login) for s in "abc"]
        self.teams: list[Team] = []
        for name, login in logins:
            secret = f"{name}-s3cret-{self.tag}"
            self.secrets.add(secret)
            conn = self._connect(login, [self.t.private_filter(name)], name)
            self.teams.append(Team(conn, self.t, name, secret))
        if self.acl:
            a, b = self.teams[0], self.teams[1]
            spy_filters = [self.t.private_filter(a.name), self.t.request_participation]
            self.spy = self._connect(self._login(b.name, dict(o.teams)[b.name]), spy_filters, "spy")
            anon_filters = [*self.t.public_filters, *spy_filters]
            self.anon = self._connect(self._login(None, None), anon_filters, "anonymous")
        for team in self.teams:  # derive keys now, off the clock of the games
            _ = team.key

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.close()

    # -- helpers ----------------------------------------------------------------------

    def is_inbound(self, m: Msg) -> bool:
        return self.is_inbound_topic(m.topic)

    def is_inbound_topic(self, topic: str) -> bool:
        return topic == self.t.request_participation or topic.endswith(("/fire", "/place"))

    def referee_messages(self, after: int) -> list[Msg]:
        return [m for m in self.obs.since(after) if self.t.owns(m.topic) and not self.is_inbound(m)]

    def error_after(self, topic: str, after: int, timeout: float = 5.0) -> dict[str, Any]:
        report = self.obs.wait(lambda m: m.topic == topic and bool(m.payload), after, timeout, what=f"error on {topic}")
        value = report.json()
        expect(
            isinstance(value, dict) and isinstance(value.get("error"), str) and value["error"],
            f"{topic}: an error report must be JSON with a readable 'error': {report.text!r}",
        )
        return dict(value)

    def quiet(self, pred: Callable[[Msg], bool], after: int, seconds: float = QUIET) -> None:
        time.sleep(seconds)
        bad = [m for m in self.obs.since(after) if pred(m)]
        expect(not bad, f"unexpected {bad[0].topic} = {bad[0].text[:120]!r}" if bad else "")

    def retained(self, topics: list[str]) -> dict[str, str]:
        """What a fresh subscriber gets as retained for ``topics``."""
        rec = Recorder(self.obs.broker, topics, label="conformance-snapshot")
        try:
            time.sleep(QUIET)
            return {m.topic: m.text for m in rec.messages if m.retain}
        finally:
            rec.close()

    def snapshot(self, topics: list[str]) -> dict[str, str]:
        """The retained values of ``topics`` (filters allowed), fast: on MQTT 5
        the observer's retain-as-published flags tell what the referee retained
        without a new subscription (whose quiet wait could outlast a short turn
        or reset); on 3.1.1, a fresh subscriber is asked."""
        if not self.obs.broker.mqtt5:
            return self.retained(topics)
        latest: dict[str, Msg] = {}
        for m in self.obs.messages:
            if any(matches(f, m.topic) for f in topics) and (m.retain or not m.payload):
                latest[m.topic] = m
        return {topic: m.text for topic, m in latest.items() if m.payload}

    def retained_under_arena(self) -> dict[str, str]:
        return self.retained([self.t.everything()] if self.o.prefix else ["/game/#", "/players/#"])

    def turn_or_over(self, turn: int) -> Callable[[Msg], bool]:
        is_turn = field_is(self.t.turn, "turn", turn)
        return lambda m: is_turn(m) or (m.topic == self.t.state and m.payload == b"over")

    def joined_or_refused(self, name: str) -> Callable[[Msg], bool]:
        t = self.t
        return lambda m: (
            (m.topic == t.players_list and name in json.loads(m.payload)) or m.topic == t.player_error(name)
        )

    def wait_state(self, state: str, after: int, timeout: float) -> Msg:
        return self.obs.wait_for(self.t.state, state, after=after, timeout=timeout)

    def await_idle_lobby(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            snap = self.retained([self.t.state, self.t.players_list])
            if snap.get(self.t.state) == "lobby" and not json.loads(snap.get(self.t.players_list) or "[]"):
                return
            time.sleep(0.5)
        raise Abort("the arena did not become an idle lobby (is another game running on it?)")

    # -- run --------------------------------------------------------------------------

    def run(self) -> list[Result]:
        reason = ""
        try:
            self._setup()  # a refused login is the caller's error, not a result
        except ConnectionError:
            self.close()
            raise
        try:
            self.preflight()
            try:
                self.game1()
            except (Abort, TimeoutError, CaseFailed) as exc:
                reason = f"game 1 stopped: {exc}"
            if any(self.wanted(c) for c in GAME2_CASES):
                try:
                    self.await_idle_lobby(self.learned.get("reset", 10) + 20)
                    self.game2()
                except (Abort, TimeoutError, CaseFailed) as exc:
                    reason = reason or f"game 2 stopped: {exc}"
            self.final_checks()
        except (Abort, ConnectionError, TimeoutError) as exc:
            reason = reason or str(exc)
        finally:
            self.close()
        for case_id in CASES:
            if case_id not in self.results:
                if not self.wanted(case_id):
                    self._record(case_id, "skip", "not selected")
                elif failures := self._soft.get(case_id):
                    self._record(case_id, "fail", failures[0])  # seen failing before the stop
                else:
                    self._record(case_id, "fail", f"not reached ({reason or 'no result'})")
        return [self.results[c] for c in CASES]

    # -- preflight --------------------------------------------------------------------

    def preflight(self) -> None:
        t = self.t
        with self.case("presence.server"):
            msg = self.obs.wait_for(t.server, "up", timeout=10)
            expect(msg.retain or self.retained([t.server]).get(t.server) == "up", "/game/server 'up' is not retained")
        with self.case("presence.pubkey"):
            key = self.obs.wait(lambda m: m.topic == t.pubkey and bool(m.payload), timeout=10, what="/game/pubkey")
            expect(len(base64.b64decode(key.payload, validate=True)) == 32, "not base64 of 32 bytes")
            expect(self.retained([t.pubkey]).get(t.pubkey) == key.text, "/game/pubkey is not retained")
            self.pubkey = key.text
        with self.case("presence.lobby"):
            self.await_idle_lobby(60)
        if "presence.lobby" in self.results and self.results["presence.lobby"].status == "fail":
            raise Abort("no idle lobby")

    # -- game 1 ---------------------------------------------------------------------------

    def game1(self) -> None:
        t, obs = self.t, self.obs
        a, b, c = self.teams
        start = obs.mark()

        # join --------------------------------------------------------------------
        with self.case("join.plain"):
            a.join()
            lst = obs.wait_for(t.players_list, json.dumps([a.name]).replace(" ", ""), after=start)
            obs.wait_for(t.players_count, "1", after=start)
            snap = self.snapshot([t.players_list, t.players_count])
            expect(json.loads(snap.get(t.players_list, "[]")) == [a.name], "/players/list is not retained")
            expect(snap.get(t.players_count) == "1", "/players/count is not retained")
            del lst
        if self.results["join.plain"].status == "fail":
            raise Abort("plain join failed")
        with self.case("join.deadline"):
            d1 = obs.wait(lambda m: m.topic == t.deadline and bool(m.payload), after=start, what="/game/deadline")
            value = d1.json()
            expect(value.get("phase") == "placement", f"phase should be placement: {value}")
            expect(isinstance(value.get("at"), (int, float)), f"'at' should be unix seconds: {value}")
            self.learned["placement"] = float(value["at"]) - d1.at
        mark = obs.mark()
        with self.case("join.sealed"):
            expect(self.pubkey is not None, "no /game/pubkey to seal to")
            b.join(self.pubkey)
            obs.wait(lambda m: m.topic == t.players_list and json.loads(m.payload) == [a.name, b.name], after=mark)
            obs.wait_for(t.players_count, "2", after=mark)
        with self.case("join.deadline"):
            d2 = obs.wait(lambda m: m.topic == t.deadline and bool(m.payload), after=mark, what="a re-armed deadline")
            expect(d2.json()["at"] > d1.json()["at"], "the deadline was not re-armed by the second join")
        c.join()
        obs.wait_for(t.players_count, "3", after=mark, timeout=10)
        with self.case("fire.outside_turn"):
            m2 = obs.mark()
            a.fire(b.name, 0, 0)
            report = self.error_after(t.errors, m2)
            expect(report.get("topic") == t.fire(b.name), f"the report should name the fire topic: {report}")
        with self.case("join.repeat"):
            m2 = obs.mark()
            a.join()
            self.quiet(lambda m: m.topic in (t.player_error(a.name), t.players_list, t.players_count), m2, 1.5)
        with self.case("join.taken"):
            m2 = obs.mark()
            impostor = Team(a.conn, t, a.name, f"other-{self.tag}")
            self.secrets.add(impostor.secret)
            impostor.join()
            report = self.error_after(t.player_error(a.name), m2)
            expect("taken" in report["error"].lower(), f"reason should say 'name taken': {report['error']!r}")
            expect(not obs.on(t.players_list, after=m2), "the list changed")
        with self.case("join.invalid_names"):
            bad = ["a/b", "a+b", "a#b", "$SYS", "a b", "", "nul\u0000", "é", "x" * 33]
            for name in bad:
                m2 = obs.mark()
                a.conn.publish(t.request_participation, json.dumps({"name": name, "secret": "s"}))
                report = self.error_after(t.errors, m2)
                expect(report.get("topic") == t.request_participation, f"/game/errors needs the topic: {report}")
            self.quiet(lambda m: m.topic == t.players_list, m2, 0.2)
        with self.case("join.full"):
            joined = 3
            for i in range(40):
                dummy = Team(a.conn, t, f"conf{self.tag}d{i}", f"dummy-{self.tag}")
                self.secrets.add(dummy.secret)
                m2 = obs.mark()
                dummy.join()
                got = obs.wait(
                    self.joined_or_refused(dummy.name),
                    after=m2,
                    what=f"an answer to {dummy.name}'s join",
                )
                if got.topic == t.players_list:
                    joined += 1
                    obs.wait_for(t.players_count, str(joined), after=m2)
                    continue
                expect("full" in got.json()["error"].lower(), f"reason should say the lobby is full: {got.text}")
                self.quiet(lambda m: m.topic == t.players_count, m2, 0.2)
                self.dummies = [f"conf{self.tag}d{k}" for k in range(i)]
                self.learned["max_players"] = joined
                break
            else:
                raise CaseFailed("40 extra joins were accepted: start the referee with --max-players 30 or less")
        last_join = obs.latest(t.deadline)

        # placements ----------------------------------------------------------------
        # b and c complete first, a last: the play order is b, c, a
        fleet_b, fleet_c = fleet_columns(5), fleet_rows(5)
        for ship, p in fleet_b.items():
            b.place(ship, p)
        for ship, p in fleet_c.items():
            c.place(ship, p)
        A = t.approved
        with self.case("place.approved"):
            for ship in SHIP_IDS:
                obs.wait_for(A(b.name, ship), "true", after=mark)
            snap = self.snapshot([A(b.name, s) for s in SHIP_IDS])
            expect(all(snap.get(A(b.name, s)) == "true" for s in SHIP_IDS), f"approved not retained: {snap}")
        for ship in SHIP_IDS:
            obs.wait_for(A(c.name, ship), "true", after=mark)

        def rejected(ship: str, send: Callable[[], object], fragment: str = "") -> dict[str, Any]:
            m2 = obs.mark()
            send()
            report = self.error_after(t.ship_error(a.name, ship), m2)
            expect(
                fragment.lower() in report["error"].lower(), f"reason should mention {fragment!r}: {report['error']!r}"
            )
            self.quiet(lambda m: m.topic == A(a.name, ship) and m.payload == b"true", m2, 0.1)
            return report

        body = '{"coordinates":"%s","orientation":"%s"}'
        with self.case("place.wrong_secret"):
            other = team_key(a.name, "not-the-secret")
            rejected("submarine", lambda: a.place_raw("submarine", body % ("0;3", "HORIZONTAL"), key=other))
        with self.case("place.approved_false"):
            snap = self.snapshot([A(a.name, "submarine")])
            expect(snap.get(A(a.name, "submarine")) == "false", f"approved should stay 'false' (retained): {snap}")
        with self.case("place.malformed"):
            rejected("carrier", lambda: a.conn.publish(t.place(a.name, "carrier"), "!!not base64!!"))
            rejected("carrier", lambda: a.place_raw("carrier", "not json"))
            rejected("carrier", lambda: a.place_raw("carrier", '{"coordinates":"0;0"}'))
        with self.case("place.unknown_ship"):
            rejected("canoe", lambda: a.place_raw("canoe", body % ("0;0", "HORIZONTAL")))
        with self.case("place.off_board"):
            rejected("carrier", lambda: a.place_raw("carrier", body % ("6;0", "HORIZONTAL")))
            rejected("carrier", lambda: a.place_raw("carrier", body % ("0;6", "VERTICAL")))
            rejected("carrier", lambda: a.place_raw("carrier", body % ("-1;0", "HORIZONTAL")))
        with self.case("place.approved"):
            m2 = obs.mark()
            a.place("carrier", Placement(0, 0, H))
            obs.wait_for(A(a.name, "carrier"), "true", after=m2)
        with self.case("place.overlap"):
            report = rejected("battleship", lambda: a.place_raw("battleship", body % ("2;0", "VERTICAL")))
            expect(
                "0;0" not in report["error"] and "(0, 0)" not in report["error"],
                f"the reason names the carrier's coordinates: {report['error']!r}",
            )
        with self.case("place.encodings"):
            m2 = obs.mark()
            a.place_raw("battleship", '{"coordinates":{"x":0,"y":1},"Orientation":"horizontal"}')
            obs.wait_for(A(a.name, "battleship"), "true", after=m2)
        with self.case("place.move"):
            m2 = obs.mark()
            a.place("carrier", Placement(0, 9, H))  # moved: its old cells are free again
            obs.wait_for(A(a.name, "carrier"), "true", after=m2)
            m2 = obs.mark()
            a.place("destroyer", Placement(0, 0, H))
            obs.wait_for(A(a.name, "destroyer"), "true", after=m2)
            rejected("patrolboat", lambda: a.place_raw("patrolboat", body % ("1;8", "VERTICAL")))
        with self.case("place.not_joined"):
            ghost = f"conf{self.tag}ghost"
            m2 = obs.mark()
            self.obs.publish(t.place(ghost, "carrier"), crypto.seal(team_key(ghost, "g"), body % ("0;0", "HORIZONTAL")))
            self.error_after(t.ship_error(ghost, "carrier"), m2)
        fleet_a = {
            "carrier": Placement(0, 9, H),
            "battleship": Placement(0, 1, H),
            "destroyer": Placement(0, 0, H),
            "submarine": Placement(0, 3, H),
            "patrolboat": Placement(0, 5, H),
        }
        m2 = obs.mark()
        a.place("submarine", fleet_a["submarine"])
        a.place("patrolboat", fleet_a["patrolboat"])
        for ship in ("submarine", "patrolboat"):
            obs.wait_for(A(a.name, ship), "true", after=m2)
        if obs.on(t.state, after=start):
            raise Abort(f"the game started before the suite had placed its fleets: {RECOMMENDED}")

        # start at the deadline, dummies left out -----------------------------------------
        wait = max(0.0, float(last_join.json()["at"]) - time.time()) + 5 if last_join else 15
        started = self.wait_state("turn", start, wait)
        order = [b.name, c.name, a.name]
        with self.case("start.deadline_exclusion"):
            if last_join:
                expect(started.at >= float(last_join.json()["at"]) - 1.0, "the game started before the deadline")
            for dummy_name in self.dummies:
                self.error_after(t.player_error(dummy_name), start, timeout=3)
        with self.case("start.play_order_list"):
            obs.wait(lambda m: m.topic == t.players_list and json.loads(m.payload) == order, after=start)
            snap = self.snapshot([t.players_list, t.players_count])
            expect(json.loads(snap.get(t.players_list, "[]")) == order, f"list should be play order {order}: {snap}")
            expect(snap.get(t.players_count) == "3", f"count should be 3: {snap}")
        with self.case("start.outside_lobby"):
            m2 = obs.mark()
            late = Team(a.conn, t, f"conf{self.tag}late", f"late-{self.tag}")
            self.secrets.add(late.secret)
            late.join()
            report = self.error_after(t.player_error(late.name), m2)
            expect("progress" in report["error"].lower(), f"reason should say 'game in progress': {report}")
            m2 = obs.mark()
            a.place("carrier", Placement(5, 9, H))
            self.error_after(t.ship_error(a.name, "carrier"), m2)

        model = Model({a.name: Board(fleet_a), b.name: Board(fleet_b), c.name: Board(fleet_c)}, order=order)
        self.play_game1(model, start)

    def play_game1(self, model: Model, start: int) -> None:
        t, obs = self.t, self.obs
        teams = {team.name: team for team in self.teams}
        a, _b, c = self.teams
        expected: str | None = None
        turn_no = 0
        repeat_tested = self_tested = False
        while True:
            turn_no += 1
            msg = obs.wait(
                field_is(t.turn, "turn", turn_no),
                after=start,
                what=f"/game/turn for turn {turn_no}",
            )
            info = msg.json()
            shooter, allowed = info["player"], info["shots"]
            after_turn = obs.messages.index(msg)
            current = obs.wait(lambda m: m.topic == t.current, after=after_turn, what="/game/current")
            self.note("turn.announce", set(info) >= {"turn", "player", "shots"}, f"/game/turn fields: {info}")
            self.note("turn.announce", current.text == shooter, f"/game/current {current.text!r} != {shooter!r}")
            if self.obs.broker.mqtt5:  # retain-as-published: the flag is the referee's
                self.note("turn.announce", msg.retain and current.retain, "/game/turn or /game/current not retained")
            if turn_no == 1:
                self.note("turn.order", shooter in model.order, f"first player {shooter!r} is not a participant")
            else:
                self.note(
                    "turn.order", shooter == expected, f"turn {turn_no}: {shooter!r} played, {expected!r} expected"
                )
            self.note("turn.skip_defeated", shooter not in model.defeated, f"defeated {shooter!r} got a turn")
            self.note(
                "turn.allowance",
                allowed == model.afloat(shooter),
                f"turn {turn_no}: {allowed} shots allowed, {model.afloat(shooter)} ships afloat",
            )
            allowed = model.afloat(shooter)  # fire what the rules allow, whatever was announced
            team = teams[shooter]
            shots = self.plan(model, shooter, allowed)
            mark = obs.mark()
            if turn_no == 1:
                self.bad_fire_messages(team, next(x for x in self.teams if x.name != shooter), turn_no)
            if c.name in model.defeated and not self.results.get("fire.defeated_target"):
                with self.case("fire.defeated_target"):
                    m2 = obs.mark()
                    team.fire(c.name, 0, 0, turn=turn_no)
                    self.error_after(t.player_error(shooter), m2)
            sent: list[str] = []
            for i, (target, x, y) in enumerate(shots):
                if i == len(shots) - 1 and turn_no == 1:
                    time.sleep(0.3)  # had a rejected message counted, the salvo would be over now
                    ended = [m for m in obs.since(mark) if m.topic == t.salvo]
                    self.note("fire.not_counted", not ended, "the salvo ended before all valid shots were sent")
                sent.append(team.fire(target, x, y, turn=turn_no if turn_no % 2 else None))
                if i == 0 and not repeat_tested and len(shots) > 1:
                    repeat_tested = True
                    with self.case("fire.replay"):
                        m2 = obs.mark()
                        obs.wait(on_topic(t.hit(target)), after=mark, what="the first hit")
                        team.conn.publish(t.fire(target), sent[0])
                        self.error_after(t.player_error(shooter), m2)
            salvo = obs.wait(
                field_is(t.salvo, "turn", turn_no),
                after=mark,
                what=f"/game/salvo of turn {turn_no}",
            )
            # The model follows the shots the referee accepted: its hit messages.
            upto = obs.messages.index(salvo)
            accepted = [
                (m.topic.split("/")[-2], m.json()["x"], m.json()["y"])
                for m in obs.messages[mark:upto]
                if m.topic.endswith("/hit") and t.owns(m.topic)
            ]
            hits, sunk, defeated = model.apply(shooter, turn_no, accepted)
            end = obs.wait(
                self.turn_or_over(turn_no + 1),
                after=mark,
                what="the next turn or the end",
            )
            self.check_salvo(mark, obs.messages.index(end), shooter, turn_no, shots, hits, sunk, defeated, salvo)
            valid = salvo.json().get("shots")
            self.note("fire.not_counted", turn_no > 1 or valid == len(shots), f"turn 1: {valid} of {len(shots)} shots")
            if shooter == c.name and not self_tested and c.name not in model.defeated:
                self_tested = True
                with self.case("fire.self"):
                    got = [m for m in obs.since(mark) if m.topic == t.hit(c.name)]
                    expect(
                        len(got) == len(shots), f"{len(got)} of {len(shots)} self-shots reached /players/{c.name}/hit"
                    )
            if end.topic == t.state:
                break
            expected = model.next_after(shooter)
            if turn_no > 60:
                raise Abort("game 1 did not end within 60 turns")
        self.settle(
            "turn.announce",
            "turn.order",
            "turn.allowance",
            "turn.skip_defeated",
            "fire.hit_topic",
            "fire.hit_rule",
            "salvo.counts",
            "salvo.sinks_at_end",
            "salvo.order",
            "fire.not_counted",
        )
        self.check_over(model, start, a.name)

    def plan(self, model: Model, shooter: str, n: int) -> list[tuple[str, int, int]]:
        """c dies first, then b; a wins. c fires at itself (empty cells); b at
        a's empty cells once c is gone. The first salvo at c repeats a cell."""
        a, b, c = (team.name for team in self.teams)
        if shooter == c:
            return [(c, x, y) for x, y in model.boards[c].empty_cells()[:n]]
        victim = c if c not in model.defeated else b
        if shooter == b and victim == b:
            return [(a, x, y) for x, y in model.boards[a].empty_cells()[:n]]
        todo = model.boards[victim].unhit_ship_cells()
        if not model.boards[victim].hit and n >= 2 and todo:
            todo = [todo[0], *todo]  # the same ship cell twice: both must count
        cells = todo[:n] + model.boards[victim].empty_cells()[: max(0, n - len(todo))]
        return [(victim, x, y) for x, y in cells]

    def bad_fire_messages(self, team: Team, other: Team, turn: int) -> None:
        """Turn 1: every kind of bad fire message, sent back to back (the turn
        clock runs), each to be rejected on the current player's error topic.
        A referee handles one publisher's messages in order, so the reports
        are matched to the messages by position."""
        t, obs = self.t, self.obs
        target, err = other.name, t.player_error(team.name)
        stolen = json.loads(other.signed({"x": 1, "y": 1}))["signature"]
        mine = json.loads(team.signed({"x": 1, "y": 1}))["signature"]
        bad: list[tuple[str, str, str]] = [
            ("fire.bad_json", t.fire(target), '{"data": {"x": 1, "y": 1}, "signature": '),
            ("fire.bad_signature", t.fire(target), json.dumps({"data": {"x": 1, "y": 1}, "signature": stolen})),
            ("fire.data_mismatch", t.fire(target), json.dumps({"data": {"x": 2, "y": 1}, "signature": mine})),
            ("fire.turn_field", t.fire(target), team.signed({"x": 1, "y": 1, "turn": turn + 7})),
            ("fire.off_board", t.fire(target), team.signed({"x": BOARD_SIZE, "y": 0})),
            ("fire.off_board", t.fire(target), team.signed({"x": 0, "y": -1})),
            ("fire.off_board", t.fire(target), team.signed({"x": 0, "y": BOARD_SIZE})),
            ("fire.unknown_target", t.fire(f"conf{self.tag}nobody"), team.signed({"x": 0, "y": 0})),
        ]
        m2 = obs.mark()
        for _case, topic, payload in bad:
            team.conn.publish(topic, payload)
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: len(obs.on(err, after=m2)) >= len(bad), 5)
        reports = obs.on(err, after=m2)
        for i, (case_id, topic, _payload) in enumerate(bad):
            ok = i < len(reports) and reports[i].json().get("topic") == topic and bool(reports[i].json().get("error"))
            detail = f"report {reports[i].text}" if i < len(reports) else "no error report"
            self.note(case_id, ok, f"message {i + 1} of the bad batch: {detail}")
        hits = [m.topic for m in obs.since(m2) if m.topic.endswith("/hit")]
        for case_id, _topic, _payload in bad:
            self.note(case_id, not hits, f"a rejected message produced {hits[:1]}")
        self.settle(*dict.fromkeys(c for c, _t, _p in bad))
        with self.case("fire.out_of_turn"):
            m3 = obs.mark()
            other.fire(team.name, 0, 0)
            self.error_after(err, m3)
            expect(not obs.on(t.hit(team.name), after=m3), "a shot of a player not on turn was accepted")

    def check_salvo(
        self,
        mark: int,
        end: int,
        shooter: str,
        turn: int,
        shots: list[tuple[str, int, int]],
        hits: int,
        sunk: set[tuple[str, str]],
        defeated: set[str],
        salvo: Msg,
    ) -> None:
        t = self.t
        msgs = [
            m
            for m in self.obs.messages[mark : end + 1]
            if self.t.owns(m.topic)
            and not self.is_inbound(m)
            and m.topic != t.deadline
            and not m.topic.endswith(("/error", "/errors"))
        ]
        hit_msgs = [m for m in msgs if m.topic.endswith("/hit")]
        got = [(m.topic, m.json()["x"], m.json()["y"]) for m in hit_msgs]
        want = [(t.hit(tg), x, y) for tg, x, y in shots]
        self.note("fire.hit_topic", got == want, f"turn {turn}: hit messages {got} != {want}")
        self.note("fire.hit_topic", not any(m.retain for m in hit_msgs), f"turn {turn}: a hit message was retained")
        if len({(x, y, tg) for tg, x, y in shots}) < len(shots):
            self.note("fire.hit_rule", salvo.json().get("hits") == hits, f"turn {turn}: repeated hit not counted")
        self.note(
            "salvo.counts",
            salvo.json() == {"turn": turn, "player": shooter, "shots": len(shots), "hits": hits},
            f"turn {turn}: /game/salvo {salvo.text} (expected {len(shots)} shots, {hits} hits)",
        )
        self.note("salvo.counts", salvo.retain, f"turn {turn}: /game/salvo not retained")
        rest = [m for m in msgs if not m.topic.endswith("/hit")]
        topics = [m.topic for m in rest]
        i = topics.index(t.hits) if t.hits in topics else -1
        self.note(
            "salvo.counts",
            i >= 0 and rest[i].text == str(hits) and not rest[i].retain,
            f"turn {turn}: /game/hits missing, wrong or retained",
        )
        first_sink = next((k for k, m in enumerate(msgs) if m.topic.endswith("/sunk")), None)
        last_hit = max((k for k, m in enumerate(msgs) if m.topic.endswith("/hit")), default=-1)
        self.note(
            "salvo.sinks_at_end",
            first_sink is None or first_sink > last_hit,
            f"turn {turn}: a sink was announced before the salvo's last shot",
        )
        if i < 0:
            return
        seq = topics[i:]
        k = 1
        ok = k < len(seq) and seq[k] == t.salvo
        k += 1
        sunk_seen = set()
        while k < len(seq) and seq[k].endswith("/sunk"):
            level = seq[k].split("/")
            sunk_seen.add((level[-4], level[-2]))
            k += 1
        defeated_seen = set()
        while k < len(seq) and seq[k].endswith("/defeated"):
            defeated_seen.add(seq[k].split("/")[-2])
            k += 1
        nxt = seq[k] if k < len(seq) else ""
        ok = (
            ok
            and sunk_seen == sunk
            and defeated_seen == defeated
            and nxt in (t.turn, t.current, t.winner, t.state, t.stats_summary)
        )
        self.note(
            "salvo.order",
            ok,
            f"turn {turn}: end of salvo was {seq[: k + 1]}; sinks {sorted(sunk)}, defeats {sorted(defeated)} expected",
        )

    def check_over(self, model: Model, start: int, winner: str) -> None:
        t, obs = self.t, self.obs
        over_at = obs.wait_for(t.state, "over", after=start)
        with self.case("over.winner"):
            expect(obs.latest(t.winner) is not None, "no /game/winner")
            snap = self.snapshot([t.winner, t.state])
            expect(snap.get(t.winner) == winner, f"/game/winner should be {winner!r} (retained): {snap}")
            expect(snap.get(t.state) == "over", f"/game/state should be 'over' (retained): {snap}")
        total_turns = max(model.defeated.values())
        with self.case("over.summary"):
            snap = self.snapshot([t.stats_summary])
            s = json.loads(snap[t.stats_summary])
            expect(set(s) >= {"winner", "turns", "shots", "hits", "duration_s", "termination"}, f"fields: {s}")
            expect(s["winner"] == winner, f"winner {s['winner']!r}")
            expect(s["turns"] == total_turns, f"turns {s['turns']} != {total_turns}")
            expect(s["shots"] == sum(model.shots.values()), f"shots {s['shots']} != {sum(model.shots.values())}")
            expect(s["hits"] == sum(model.hits.values()), f"hits {s['hits']} != {sum(model.hits.values())}")
            expect(isinstance(s["duration_s"], (int, float)) and s["duration_s"] >= 0, "duration_s")
            expect(isinstance(s["termination"], str) and s["termination"], "termination")
        with self.case("over.players"):
            snap = self.snapshot([f"{t.stats_summary.removesuffix('summary')}players/+"])
            for name in model.order:
                st = json.loads(snap[t.stats_player(name)])
                fields = {
                    "place",
                    "shots",
                    "hits",
                    "accuracy",
                    "ships_sunk",
                    "ships_lost",
                    "defeated_in_turn",
                    "reason",
                }
                expect(set(st) >= fields, f"{name}: fields {sorted(st)}")
                expect(st["shots"] == model.shots.get(name, 0), f"{name}: shots {st['shots']}")
                expect(st["hits"] == model.hits.get(name, 0), f"{name}: hits {st['hits']}")
                expect(st["ships_lost"] == len(model.boards[name].sunk), f"{name}: ships_lost {st['ships_lost']}")
                expect(st["defeated_in_turn"] == model.defeated.get(name), f"{name}: defeated_in_turn")
                expect((st["place"] == 1) == (name == winner), f"{name}: place {st['place']}")
                expect(st["reason"] != "timeout", f"{name} was sunk, not timed out")
        with self.case("over.reset"):
            lobby = self.wait_state("lobby", obs.messages.index(over_at), timeout=30)
            self.learned["reset"] = lobby.at - over_at.at
            left = {
                k: v
                for k, v in self.retained_under_arena().items()
                if k not in (t.state, t.server, t.pubkey) and not self.is_inbound_topic(k)
            }
            expect(not left, f"still retained after the reset: {sorted(left)[:6]}")

    # -- game 2 ---------------------------------------------------------------------------

    def game2(self) -> None:
        t, obs = self.t, self.obs
        a, b, _c = self.teams
        start = obs.mark()
        a.join()
        b.join()
        obs.wait_for(t.players_count, "2", after=start)
        before = obs.mark()
        with self.case("robust.garbage"):
            garbage = [
                b"",
                b"\x00\xff\xfe",
                b"{",
                b"[]",
                b"null",
                b'{"data": null}',
                "💥".encode() * 50,
                b"A" * 5000,
                b'{"name": 7, "secret": []}',
                b"[" * 2000,
            ]
            topics = [t.request_participation, t.place(a.name, "carrier"), t.fire(b.name), t.fire(a.name)]
            for topic in topics:
                for payload in garbage:
                    self.obs.publish(topic, payload)
            n = len(garbage) * len(topics)

            def reports() -> int:
                return sum(
                    1 for m in obs.since(before) if m.topic.endswith(("/error", "/errors")) and self.t.owns(m.topic)
                )

            wait_until(lambda: reports() >= n, 10, what=f"{n} error reports")
            time.sleep(0.3)
            expect(reports() == n, f"{reports()} reports for {n} garbage messages")
            changed = [
                m.topic
                for m in obs.since(before)
                if m.topic in (t.players_list, t.players_count, t.state)
                or (m.topic.endswith("/approved") and m.payload == b"true")
            ]
            expect(not changed, f"garbage changed {changed}")
        fleet_a, fleet_b = fleet_rows(0), fleet_columns(0)
        for ship, p in fleet_a.items():
            a.place(ship, p)
        b.place("carrier", fleet_b["carrier"])
        for ship in SHIP_IDS:
            obs.wait_for(t.approved(a.name, ship), "true", after=start)
        deadline = obs.latest(t.deadline)
        with self.case("start.too_few"):
            expect(deadline is not None, "no placement deadline")
            assert deadline is not None
            time.sleep(max(0.0, float(deadline.json()["at"]) - time.time()) + 1.0)
            snap = self.retained([t.state])
            expect(snap.get(t.state) == "lobby", f"the lobby should stay open: {snap}")
            expect(not obs.on(t.player_error(b.name), after=start), "a player was told it is left out")
        m2 = obs.mark()
        for ship in SHIP_IDS[1:]:
            b.place(ship, fleet_b[ship])
        with self.case("start.all_ready"):
            started = self.wait_state("turn", m2, timeout=3)
            del started
        first = obs.wait(lambda m: m.topic == t.turn and bool(m.payload), after=m2).json()
        idle = next(x for x in (a, b) if x.name == first["player"])
        active = b if idle is a else a
        fleets = {a.name: fleet_a, b.name: fleet_b}
        empty_of = {n: Board(f).empty_cells() for n, f in fleets.items()}
        with self.case("robust.continues"):
            # the idle player fires one shot, then lets the turn time out
            m3 = obs.mark()
            x, y = empty_of[active.name][0]
            t0 = time.time()
            idle.fire(active.name, x, y, turn=1)
            salvo = obs.wait(
                lambda m: m.topic == t.salvo and bool(m.payload) and m.json()["turn"] == 1,
                after=m3,
                timeout=15,
                what="the first salvo",
            )
            self.learned["turn"] = time.time() - t0
        with self.case("timeout.partial"):
            expect(salvo.json()["shots"] == 1 and salvo.json()["player"] == idle.name, f"salvo {salvo.text}")
        with self.case("timeout.drop"):
            missed = 0
            turn_no = 1
            while True:
                turn_no += 1
                msg = obs.wait(
                    self.turn_or_over(turn_no),
                    after=m3,
                    timeout=15,
                    what=f"turn {turn_no}",
                )
                if msg.topic == t.state:
                    break
                info = msg.json()
                if info["player"] == active.name:
                    for k in range(info["shots"]):
                        ex, ey = empty_of[idle.name][k + turn_no]
                        active.fire(idle.name, ex, ey, turn=turn_no)
                else:
                    missed += 1
                if turn_no > 30:
                    raise CaseFailed("the idle player was never dropped")
            expect(missed >= 1, "dropped without missing a turn")
            self.learned["max_missed_turns"] = missed
            snap = self.snapshot([t.defeated(idle.name), t.winner, t.stats_player(idle.name)])
            expect(snap.get(t.defeated(idle.name)) == "true", f"{idle.name} should be defeated (retained)")
            expect(snap.get(t.winner) == active.name, f"winner should be {active.name}: {snap.get(t.winner)}")
            stats = json.loads(snap.get(t.stats_player(idle.name), "{}"))
            expect(stats.get("reason") == "timeout", f"{idle.name}'s stats should say reason timeout: {stats}")
        over = obs.latest(t.state)
        if over is not None and over.text == "over":
            self.wait_state("lobby", obs.messages.index(over), timeout=30)

    # -- after both games ------------------------------------------------------------------

    def final_checks(self) -> None:
        t = self.t
        with self.case("settings.timeouts"):
            p, turn, reset = (self.learned.get(k) for k in ("placement", "turn", "reset"))
            detail = f"placement {p}, turn {turn}, reset {reset} (recommended: {RECOMMENDED})"
            expect(p is not None and 0.5 <= p <= 10, f"placement timeout must be 1-10 s: {detail}")
            expect(turn is None or turn <= 5.5, f"turn timeout must be at most 5 s: {detail}")
            expect(reset is None or reset <= 10.5, f"reset-after must be at most 10 s: {detail}")
        with self.case("privacy.secrets"):
            leaks = [
                m.topic
                for m in self.obs.messages
                if not self.is_inbound(m) and any(s.encode() in m.payload for s in self.secrets)
            ]
            expect(not leaks, f"a secret was published on {leaks[:3]}")
        if self.o.prefix:
            with self.case("prefix.contained"):
                ours = {team.name for team in self.teams}
                outside = [
                    m.topic
                    for m in self.obs.messages
                    if not self.t.owns(m.topic)
                    and (m.topic.startswith(("/game/", "/players/")))
                    and (m.topic.startswith("/game/") or m.topic.split("/")[2] in ours)
                ]
                expect(not outside, f"published outside the arena: {outside[:3]}")
        else:
            self.skip("prefix.contained", "no --prefix given")
        if not self.acl:
            for case_id in ("acl.private", "acl.join_topic", "acl.anonymous"):
                self.skip(case_id, "needs --team-credentials with three team logins (and --referee-user)")
            return
        a = self.teams[0]
        with self.case("acl.private"):
            own = [m for m in a.conn.messages if m.topic in (t.hit(a.name), t.approved(a.name, "carrier"))]
            expect(own, f"{a.name} itself never received its own hit/approved topics (broken test setup?)")
            a_root = t.private_filter(a.name)[:-1]
            public = ("/sunk", "/defeated")
            seen = [m.topic for m in self.spy.messages if m.topic.startswith(a_root) and not m.topic.endswith(public)]
            expect(not seen, f"another team read {sorted(set(seen))[:3]}")
        with self.case("acl.join_topic"):
            read = [m for m in self.spy.messages + self.anon.messages if m.topic == t.request_participation]
            expect(not read, "a team or anonymous client read /game/request_participation")
        with self.case("acl.anonymous"):
            expect(any(m.topic == t.state for m in self.anon.messages), "anonymous cannot read /game/state")
            private = [
                m.topic
                for m in self.anon.messages
                if m.topic.startswith(t.private_filter(a.name)[:-1]) and not m.topic.endswith(("/sunk", "/defeated"))
            ]
            expect(not private, f"anonymous read {private[:3]}")
            m2 = self.obs.mark()
            rc = self.anon.publish(t.request_participation, json.dumps({"name": f"conf{self.tag}anon", "secret": "s"}))
            expect(not self.anon.broker.mqtt5 or rc >= 0x80, f"anonymous write was acknowledged ({rc:#x})")
            self.quiet(lambda m: m.topic in (t.players_list, t.player_error(f"conf{self.tag}anon")), m2, 1.0)


def run_suite(options: Options, report: Callable[[Result], None] | None = None) -> list[Result]:
    return Suite(options, report).run()


def summary(results: list[Result]) -> str:
    n = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    return f"{n['pass']} passed, {n['fail']} failed" + (f", {n['skip']} skipped" if n["skip"] else "")
