"""One run of the suite: its connections to the broker, the results it has
recorded, and the ways it watches the referee.

Results: a case passes unless its check raises; :meth:`Session.case` tells
a failure of the referee (:class:`CaseFailed`, :class:`NoReply`) from a bug
of the suite (anything else: ERROR, and the run judges nothing more).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import string
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from salvo.net.mqtt import Broker
from salvo.net.watch import Msg, Recorder
from salvo.spec.topics import Outbound, Published, Topics, is_valid_name, matches
from salvo.tools.conformance.cases import CASES
from salvo.tools.conformance.harness import Team
from salvo.tools.conformance.verdict import (
    Abort,
    CaseFailed,
    Enough,
    NoReply,
    Result,
    SuiteBug,
    describe_bug,
    error_report,
    json_or_none,
)

QUIET = 0.6  # seconds of silence that make "nothing happened" believable


@dataclass
class Options:
    broker: Broker
    prefix: str = ""
    referee_login: tuple[str, str] | None = None  # reads everything on an ACL'd broker
    teams: list[tuple[str, str]] = field(default_factory=list)  # (name, MQTT password)
    groups: set[str] | None = None  # only these case groups
    cases: set[str] | None = None  # only these case ids (and the games stop once they have results)


#: The unprefixed arena's topics (the observer of a prefixed one reads them too).
_BARE = Topics()


class Session:
    def __init__(self, options: Options, report: Callable[[Result], None] | None = None) -> None:
        self.o = options
        self.t = Topics(options.prefix)
        self.report = report or (lambda r: None)
        self.results: dict[str, Result] = {}
        #: what each check found, selected or not (a case not selected is reported as skipped)
        self.outcomes: dict[str, str] = {}
        self._noted: set[str] = set()
        self._conns: list[Recorder] = []
        self.secrets: set[str] = set()
        self.learned: dict[str, float] = {}
        self.pubkey: str | None = None
        #: every join refusal the suite provoked: (request id, name)
        self.refusals: list[tuple[str, str]] = []
        self.tag = "".join(random.choice(string.ascii_lowercase) for _ in range(4))
        self._rids = 0

    # -- results --------------------------------------------------------------------

    def record(self, case_id: str, status: str, detail: str = "") -> None:
        if case_id in self.results:
            return
        self.outcomes[case_id] = status
        if not self.wanted(case_id) and status != "error":  # a bug of the suite is always told
            status, detail = "skip", "not selected"
        result = Result(CASES[case_id], status, detail)
        self.results[case_id] = result
        self.report(result)

    def wanted(self, case_id: str) -> bool:
        o = self.o
        return (o.groups is None or CASES[case_id].group in o.groups) and (o.cases is None or case_id in o.cases)

    def wants_any(self, case_ids: set[str]) -> bool:
        return any(self.wanted(c) and c not in self.results for c in case_ids)

    def checkpoint(self) -> None:
        """Stop the games once every selected case has its result."""
        if not self.wants_any(set(CASES)):
            raise Enough

    @contextlib.contextmanager
    def case(self, case_id: str) -> Iterator[None]:
        """Run a check: it passes unless it raises."""
        try:
            yield
        except (CaseFailed, NoReply) as exc:
            self.record(case_id, "fail", str(exc) or type(exc).__name__)
        except Abort as exc:
            self.record(case_id, "fail", str(exc))
            raise
        except (SuiteBug, Enough):
            raise
        except Exception as exc:
            self.record(case_id, "error", describe_bug(exc))
            raise SuiteBug(case_id, exc) from exc
        else:
            self.record(case_id, "pass")

    def note(self, case_id: str, ok: bool, detail: str) -> None:
        """A check made many times: its case fails at the first violation
        and passes when :meth:`settle` comes without one."""
        self._noted.add(case_id)
        if not ok:
            self.record(case_id, "fail", detail)

    def settle(self, *case_ids: str) -> None:
        for case_id in case_ids:
            if case_id in self._noted:
                self.record(case_id, "pass")  # (a no-op after a failure)

    def skip(self, case_id: str, why: str) -> None:
        self.record(case_id, "skip", why)

    def failed(self, case_id: str) -> bool:
        return self.outcomes.get(case_id, "pass") != "pass"

    # -- connections ------------------------------------------------------------------

    def _login(self, user: str | None, password: str | None) -> Broker:
        return dataclasses.replace(self.o.broker, username=user, password=password)

    def _connect(self, broker: Broker, filters: list[str] | tuple[str, ...], label: str) -> Recorder:
        rec = Recorder(broker, filters, label=f"conformance-{label}")
        self._conns.append(rec)
        return rec

    def setup(self) -> None:
        o = self.o
        observer_login = self._login(*o.referee_login) if o.referee_login else o.broker
        filters = [self.t.everything()]
        if o.prefix:  # to see anything the referee publishes outside its arena
            filters += Topics().namespace_filters
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

    def extra_team(self, kind: str, i: int | str = "") -> Team:
        """A scripted team publishing through the first team's login (a
        dummy, an impostor, a latecomer): its secret is watched for leaks."""
        team = Team(self.teams[0].conn, self.t, f"conf{self.tag}{kind}{i}", f"{kind}-{self.tag}")
        self.secrets.add(team.secret)
        return team

    def request_id(self) -> str:
        self._rids += 1
        return f"conf-{self.tag}-{self._rids}"

    # -- watching the referee ---------------------------------------------------------

    def is_inbound_topic(self, topic: str) -> bool:
        """A team's message (join, placement, shot), of this arena or, seen
        by the observer, the unprefixed one."""
        return self.t.parse_inbound(topic) is not None or _BARE.parse_inbound(topic) is not None

    def is_error_topic(self, topic: str) -> bool:
        return topic == self.t.errors or self.kind(topic) in (Outbound.PLAYER_ERROR, Outbound.SHIP_ERROR)

    def route(self, topic: str) -> Published | None:
        """A topic of this arena the referee publishes, taken apart."""
        return self.t.parse_outbound(topic)

    def kind(self, topic: str) -> Outbound | None:
        """Which of the referee's topics of this arena ``topic`` is (None: none)."""
        route = self.t.parse_outbound(topic)
        return route.kind if route is not None else None

    def game_id(self) -> str:
        """The current game's id: the last /game/id the referee published."""
        self.obs.wait(lambda m: m.topic == self.t.game_id and bool(m.payload), what=self.t.game_id)
        latest = self.obs.latest(self.t.game_id)
        if latest is None or not latest.payload:
            raise CaseFailed("/game/id was cleared and not published again")
        return latest.text

    def error_after(self, topic: str, after: int, timeout: float = 5.0, code: str | None = None) -> dict[str, Any]:
        """The next error report on ``topic``; with ``code``, it must carry it."""
        msg = self.obs.wait(lambda m: m.topic == topic and bool(m.payload), after, timeout, what=f"error on {topic}")
        report = error_report(msg)
        if code is not None and report["code"] != code:
            raise CaseFailed(f"{topic}: code should be {code!r}: {msg.text[:200]!r}")
        return report

    def join_refusal(self, name: str, rid: str, after: int, code: str, timeout: float = 5.0) -> dict[str, Any]:
        """The refusal of the join that carried request id ``rid``: it must
        have ``code``. Where it came (``/game/errors``, echoing ``rid``) is
        judged apart, by ``join.refusals``."""
        t = self.t
        private = t.player_error(name) if is_valid_name(name) else None

        def pred(m: Msg) -> bool:
            if m.topic not in (t.errors, private) or not m.payload:
                return False
            v = json_or_none(m.payload)
            if not isinstance(v, dict):
                return False
            return v.get("request_id") == rid if m.topic == t.errors else v.get("topic") == t.request_participation

        msg = self.obs.wait(pred, after, timeout, what=f"the refusal of {name!r}'s join on {t.errors}")
        self.refusals.append((rid, name))
        self.note(
            "join.refusals",
            msg.topic == t.errors,
            f"the refusal of {name!r}'s join came on {msg.topic}, not on {t.errors} with its request_id",
        )
        report = error_report(msg)
        if report["code"] != code:
            raise CaseFailed(f"the refusal of {name!r}'s join should have code {code!r}: {msg.text[:200]!r}")
        return report

    def quiet(self, pred: Callable[[Msg], bool], after: int, seconds: float = QUIET) -> None:
        time.sleep(seconds)
        bad = [m for m in self.obs.since(after) if pred(m)]
        if bad:
            raise CaseFailed(f"unexpected {bad[0].topic} = {bad[0].text[:120]!r}")

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
        if not self.obs.mqtt5:
            return self.retained(topics)
        latest: dict[str, Msg] = {}
        for m in self.obs.since(0):
            if any(matches(f, m.topic) for f in topics) and (m.retain or not m.payload):
                latest[m.topic] = m
        return {topic: m.text for topic, m in latest.items() if m.payload}

    def retained_under_arena(self) -> dict[str, str]:
        return self.retained([self.t.everything()] if self.o.prefix else list(self.t.namespace_filters))

    def players(self, text: str | None) -> list[Any]:
        """A /players/list payload as a list (CaseFailed when it is not one)."""
        value = json_or_none((text or "[]").encode())
        if not isinstance(value, list):
            raise CaseFailed(f"/players/list is not a JSON array: {text!r}")
        return value

    def list_is(self, names: list[str]) -> Callable[[Msg], bool]:
        return lambda m: m.topic == self.t.players_list and json_or_none(m.payload) == names

    def turn_or_over(self, turn: int) -> Callable[[Msg], bool]:
        t = self.t

        def pred(m: Msg) -> bool:
            if m.topic == t.state:
                return m.payload == b"over"
            v = json_or_none(m.payload) if m.topic == t.turn else None
            return isinstance(v, dict) and v.get("turn") == turn

        return pred

    def wait_state(self, state: str, after: int, timeout: float) -> Msg:
        return self.obs.wait_for(self.t.state, state, after=after, timeout=timeout)

    def index(self, msg: Msg) -> int:
        """``msg``'s position among the observer's messages (the very object:
        two messages may be equal)."""
        messages = self.obs.since(0)
        return next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is msg)

    def await_idle_lobby(self, timeout: float = 30.0, also: list[str] | None = None) -> dict[str, str]:
        """Wait for the arena's lobby with nobody in it; what a fresh
        subscriber then gets as retained (for ``also`` too)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            snap = self.retained([self.t.state, self.t.players_list, *(also or [])])
            players = json_or_none((snap.get(self.t.players_list) or "[]").encode())
            if snap.get(self.t.state) == "lobby" and not players:
                return snap
            time.sleep(0.5)
        raise Abort("the arena did not become an idle lobby (is another game running on it?)")
