"""Checks made over everything recorded once the games are over: settings,
secrets, the error reports' shape and codes, where join refusals went, the
arena prefix and the broker's access control (spec sections 2, 5, 8, 9)."""

from __future__ import annotations

import json

from salvo.spec.topics import Outbound, Topics
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import CODES, expect, json_or_none

RECOMMENDED = "salvo referee --placement-timeout 3 --turn-timeout 1.5 --reset-after 1 --max-players 6"


def final_checks(s: Session) -> None:
    if s.wanted("settings.timeouts"):
        with s.case("settings.timeouts"):
            p, turn, reset = (s.learned.get(k) for k in ("placement", "turn", "reset"))
            detail = f"placement {p}, turn {turn}, reset {reset} (recommended: {RECOMMENDED})"
            expect(p is not None and 0.5 <= p <= 10, f"placement timeout must be 1-10 s: {detail}")
            expect(turn is None or turn <= 5.5, f"turn timeout must be at most 5 s: {detail}")
            expect(reset is None or reset <= 10.5, f"reset-after must be at most 10 s: {detail}")
    if s.wanted("privacy.secrets"):
        _secrets(s)
    if s.wanted("robust.codes"):
        _codes(s)
    if s.wanted("join.refusals"):
        _refusals(s)
    if not s.o.prefix:
        s.skip("prefix.contained", "no --prefix given")
    elif s.wanted("prefix.contained"):
        _contained(s)
    access_control(s)


def _secrets(s: Session) -> None:
    with s.case("privacy.secrets"):
        leaks = [
            m.topic
            for m in s.obs.since(0)
            if not s.is_inbound_topic(m.topic) and any(secret.encode() in m.payload for secret in s.secrets)
        ]
        expect(not leaks, f"a secret was published on {leaks[:3]}")


def _codes(s: Session) -> None:
    with s.case("robust.codes"):
        reports = [m for m in s.obs.since(0) if s.is_error_topic(m.topic) and m.payload]
        expect(reports, "the suite saw no error report at all")
        for m in reports:
            value = json_or_none(m.payload)
            expect(isinstance(value, dict), f"{m.topic}: not a JSON object: {m.text[:160]!r}")
            expect(
                isinstance(value.get("topic"), str) and isinstance(value.get("error"), str) and value["error"],
                f"{m.topic}: needs a 'topic' and a readable 'error': {m.text[:160]!r}",
            )
            code = value.get("code")
            expect(code in CODES, f"{m.topic}: code {code!r} is not one of the documented codes: {m.text[:160]!r}")


def _refusals(s: Session) -> None:
    t = s.t
    messages = s.obs.since(0)
    with s.case("join.refusals"):
        expect(s.refusals, "the suite provoked no join refusal")
        for rid, name in s.refusals:  # each refusal on /game/errors, with its request id
            echoed = [m for m in messages if m.topic == t.errors and _field(m.payload, "request_id") == rid]
            expect(echoed, f"the refusal of {name!r}'s join (request_id {rid}) is not on {t.errors}")
        # and none on a player's own error topic (anyone could forge those)
        private = [
            m.topic
            for m in messages
            if s.kind(m.topic) is Outbound.PLAYER_ERROR and _field(m.payload, "topic") == t.request_participation
        ]
        expect(not private, f"a join refusal was published on {private[:3]}")


def _contained(s: Session) -> None:
    t = s.t
    with s.case("prefix.contained"):
        ours = {team.name for team in s.teams}
        bare = Topics()  # what a referee would publish had it forgotten its prefix
        outside = [
            m.topic
            for m in s.obs.since(0)
            if not t.owns(m.topic) and bare.owns(m.topic) and bare.player_of(m.topic) in {None, *ours}
        ]
        expect(not outside, f"published outside the arena: {outside[:3]}")


def _field(payload: bytes, key: str) -> object:
    value = json_or_none(payload)
    return value.get(key) if isinstance(value, dict) else None


def access_control(s: Session) -> None:
    t = s.t
    if not s.wants_any({"acl.private", "acl.join_topic", "acl.anonymous"}):
        return
    if not s.acl:
        for case_id in ("acl.private", "acl.join_topic", "acl.anonymous"):
            s.skip(case_id, "needs --team-credentials with three team logins (and --referee-user)")
        return
    a = s.teams[0]
    public = (Outbound.SUNK, Outbound.DEFEATED)
    with s.case("acl.private"):
        own = [m for m in a.conn.since(0) if m.topic in (t.hit(a.name), t.approved(a.name, "carrier"))]
        expect(own, f"{a.name} itself never received its own hit/approved topics (broken test setup?)")
        a_root = t.private_filter(a.name)[:-1]
        seen = [m.topic for m in s.spy.since(0) if m.topic.startswith(a_root) and s.kind(m.topic) not in public]
        expect(not seen, f"another team read {sorted(set(seen))[:3]}")
    with s.case("acl.join_topic"):
        read = [m for m in s.spy.since(0) + s.anon.since(0) if m.topic == t.request_participation]
        expect(not read, "a team or anonymous client read /game/request_participation")
    with s.case("acl.anonymous"):
        expect(any(m.topic == t.state for m in s.anon.since(0)), "anonymous cannot read /game/state")
        private = [
            m.topic
            for m in s.anon.since(0)
            if m.topic.startswith(t.private_filter(a.name)[:-1]) and s.kind(m.topic) not in public
        ]
        expect(not private, f"anonymous read {private[:3]}")
        m2 = s.obs.mark()
        rc = s.anon.publish(t.request_participation, json.dumps({"name": f"conf{s.tag}anon", "secret": "s"}))
        expect(not s.anon.mqtt5 or rc >= 0x80, f"anonymous write was acknowledged ({rc:#x})")
        s.quiet(lambda m: m.topic in (t.players_list, t.player_error(f"conf{s.tag}anon")), m2, 1.0)
