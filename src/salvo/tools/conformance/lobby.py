"""Presence and keys before any game (spec section 4), then game 1's joins
(section 5): plain, sealed, repeated, taken, invalid and one too many,
every refusal on /game/errors carrying its request id."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from salvo.net.watch import Msg
from salvo.tools.conformance.harness import Team
from salvo.tools.conformance.model import Model
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import Abort, CaseFailed, NoReply, expect, id_bits, json_or_none, obj


@dataclass
class Game1:
    """What game 1's phases hand on to each other."""

    a: Team
    b: Team
    c: Team
    start: int  # the observer's mark when the game began
    game_id: str
    dummies: list[str] = field(default_factory=list)
    last_join: Msg | None = None  # the last /game/deadline a join armed
    model: Model | None = None


def preflight(s: Session) -> str:
    """The referee is up, in an idle lobby; the current game's id."""
    t, obs = s.t, s.obs
    # One look at what a fresh subscriber gets, once the arena is idle.
    snap: dict[str, str] = {}
    with s.case("presence.lobby"):
        snap = s.await_idle_lobby(60, also=[t.server, t.pubkey, t.game_id])
    with s.case("presence.server"):
        msg = obs.wait_for(t.server, "up", timeout=10)
        expect(msg.retain or (snap or s.retained([t.server])).get(t.server) == "up", "/game/server 'up' not retained")
    with s.case("presence.pubkey"):
        key = obs.wait(lambda m: m.topic == t.pubkey and bool(m.payload), timeout=10, what=t.pubkey)
        try:
            raw = base64.b64decode(key.payload, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        expect(len(raw) == 32, f"not base64 of 32 bytes: {key.text[:80]!r}")
        expect((snap or s.retained([t.pubkey])).get(t.pubkey) == key.text, "/game/pubkey is not retained")
        s.pubkey = key.text
    with s.case("presence.version"):
        version = obs.wait(lambda m: m.topic == t.version and bool(m.payload), timeout=5, what=t.version)
        expect(version.text == "2.1", f"{t.version} should be 2.1: {version.text[:40]!r}")
        expect(version.retain or s.retained([t.version]).get(t.version) == "2.1", f"{t.version} is not retained")
    if s.failed("presence.lobby"):
        raise Abort("no idle lobby")
    game_id = ""
    with s.case("presence.game_id"):
        game_id = snap.get(t.game_id, "")
        expect(game_id, "no retained /game/id in the lobby")
        expect(game_id.isascii() and game_id.isprintable() and " " not in game_id, f"/game/id {game_id!r}")
        expect(len(game_id) <= 256, f"/game/id is {len(game_id)} characters long")
        bits = id_bits(game_id)
        expect(bits >= 64, f"/game/id {game_id!r} holds at most {bits:.0f} bits, at least 64 are required")
    return game_id or s.game_id()


def joins(s: Session, a: Team, b: Team, c: Team, game_id: str) -> Game1:
    t, obs = s.t, s.obs
    g = Game1(a, b, c, obs.mark(), game_id)
    start = g.start
    with s.case("join.plain"):
        a.join()
        obs.wait(s.list_is([a.name]), after=start, what=f"/players/list = [{a.name!r}]")
        obs.wait_for(t.players_count, "1", after=start)
        snap = s.snapshot([t.players_list, t.players_count])
        expect(s.players(snap.get(t.players_list)) == [a.name], "/players/list is not retained")
        expect(snap.get(t.players_count) == "1", "/players/count is not retained")
    if s.failed("join.plain"):
        raise Abort("plain join failed")
    # The deadline a's join armed, before b joins (the check is made after).
    d1: Msg | None = None
    with contextlib.suppress(NoReply):
        d1 = obs.wait(lambda m: m.topic == t.deadline and bool(m.payload), after=start, what=t.deadline)
    mark = obs.mark()
    with s.case("join.sealed"):
        expect(s.pubkey is not None, "no /game/pubkey to seal to")
        rid = s.request_id()
        b.join(s.pubkey, request_id=rid)
        # (a refusal of a request the referee could not open cannot echo its id)
        got = obs.wait(answers(s, b.name, rid, any_refusal=True), after=mark, what=f"an answer to {b.name}'s join")
        expect(got.topic == t.players_list, f"the sealed join was refused: {got.text[:200]}")
        obs.wait(s.list_is([a.name, b.name]), after=mark, what=f"{b.name} in /players/list")
        obs.wait_for(t.players_count, "2", after=mark)
    if s.failed("join.sealed"):  # judge the rest of the game all the same
        b.join()
        obs.wait(s.list_is([a.name, b.name]), after=mark, what=f"{b.name} in /players/list")
    with s.case("join.deadline"):
        expect(d1 is not None, "no /game/deadline after a join")
        assert d1 is not None
        first = obj(d1, t.deadline, ("phase", "at"))
        expect(first["phase"] == "placement", f"phase should be placement: {first}")
        expect(isinstance(first["at"], (int, float)), f"'at' should be unix seconds: {first}")
        s.learned["placement"] = float(first["at"]) - d1.at
        d2 = obs.wait(lambda m: m.topic == t.deadline and bool(m.payload), after=mark, what="a re-armed deadline")
        second = obj(d2, t.deadline, ("at",))["at"]
        expect(isinstance(second, (int, float)) and second > first["at"], "the second join did not re-arm it")
    c.join()
    obs.wait_for(t.players_count, "3", after=mark, timeout=10)
    if s.wanted("fire.outside_turn"):
        with s.case("fire.outside_turn"):
            m2 = obs.mark()
            a.fire(b.name, 0, 0, 1, game_id)
            report = s.error_after(t.player_error(a.name), m2, code="not_in_turn")
            expect(report["topic"] == t.fire(b.name), f"the report should name the fire topic: {report}")
    if s.wanted("join.repeat"):
        with s.case("join.repeat"):
            m2 = obs.mark()
            a.join()
            s.quiet(lambda m: m.topic in (t.player_error(a.name), t.players_list, t.players_count), m2, 1.0)
    if s.wanted("join.taken") or s.wanted("join.refusals"):
        taken(s, a)
    if s.wanted("join.invalid_names") or s.wanted("join.refusals"):
        invalid_names(s, a)
    if s.wanted("join.wrong_game") or s.wanted("join.request_id_echo"):
        v21_joins(s, a, game_id)
    # Always: the dummies hold the game until the deadline (they never place).
    with s.case("join.full"):
        g.dummies, s.learned["max_players"] = fill_lobby(s, "d", 3)
    g.last_join = obs.latest(t.deadline)
    return g


def taken(s: Session, a: Team) -> None:
    t, obs = s.t, s.obs
    with s.case("join.taken"):
        m2 = obs.mark()
        impostor = Team(a.conn, t, a.name, f"other-{s.tag}")
        s.secrets.add(impostor.secret)
        rid = s.request_id()
        impostor.join(request_id=rid)
        s.join_refusal(a.name, rid, m2, "name_taken")
        expect(not obs.on(t.players_list, after=m2), "the list changed")


def invalid_names(s: Session, a: Team) -> None:
    t, obs = s.t, s.obs
    with s.case("join.invalid_names"):
        bad = ["a/b", "a+b", "a#b", "$SYS", "a b", "", "nul\u0000", "é", "x" * 33]
        m2 = obs.mark()
        for name in bad:
            m3 = obs.mark()
            rid = s.request_id()
            a.conn.publish(t.request_participation, json.dumps({"name": name, "secret": "s", "request_id": rid}))
            report = s.join_refusal(name, rid, m3, "bad_name")
            expect(report["topic"] == t.request_participation, f"/game/errors needs the topic: {report}")
        s.quiet(lambda m: m.topic == t.players_list, m2, 0.2)


def v21_joins(s: Session, a: Team, game_id: str) -> None:
    """(v2.1) A joined team's own join again, naming another game: refused
    (not the silent no-op of a repeat); and one with an invalid request_id."""
    t, obs = s.t, s.obs
    with s.case("join.wrong_game"):
        m2 = obs.mark()
        rid = s.request_id()
        other = ("0" if game_id[:1] != "0" else "1") + game_id[1:]
        body = {"name": a.name, "secret": a.secret, "request_id": rid, "game": other}
        a.conn.publish(t.request_participation, json.dumps(body))
        s.join_refusal(a.name, rid, m2, "wrong_game")
    with s.case("join.request_id_echo"):
        m2 = obs.mark()
        bad = f"not valid {s.tag} " + "x" * 80  # a space: invalid; 80 more: cut
        body = {"name": a.name, "secret": a.secret, "request_id": bad}
        a.conn.publish(t.request_participation, json.dumps(body))
        s.join_refusal(a.name, bad[:64], m2, "malformed")


def fill_lobby(s: Session, kind: str, joined: int) -> tuple[list[str], int]:
    """Join dummies until the lobby refuses one (lobby_full); the dummies
    that got in, and how many players the lobby held."""
    t, obs = s.t, s.obs
    dummies: list[str] = []
    for i in range(40):
        dummy = s.extra_team(kind, i)
        m2 = obs.mark()
        rid = s.request_id()
        dummy.join(request_id=rid)
        got = obs.wait(answers(s, dummy.name, rid), after=m2, what=f"an answer to {dummy.name}'s join")
        if got.topic == t.players_list:
            joined += 1
            dummies.append(dummy.name)
            obs.wait_for(t.players_count, str(joined), after=m2)
            continue
        s.join_refusal(dummy.name, rid, m2, "lobby_full")
        s.quiet(lambda m: m.topic == t.players_count, m2, 0.2)
        return dummies, joined
    raise CaseFailed("40 extra joins were accepted: start the referee with --max-players 30 or less")


def answers(s: Session, name: str, rid: str, any_refusal: bool = False) -> Callable[[Msg], bool]:
    """The referee's answer to a join: ``name`` listed, or a refusal (on
    /game/errors with ``rid`` - or any join's with ``any_refusal`` - or on the
    name's own error topic)."""
    t = s.t

    def pred(m: Msg) -> bool:
        if m.topic == t.player_error(name):
            return True
        value = json_or_none(m.payload) if m.topic in (t.players_list, t.errors) else None
        if m.topic == t.players_list:
            return isinstance(value, list) and name in value
        if not isinstance(value, dict):
            return False
        return value.get("request_id") == rid or (any_refusal and value.get("topic") == t.request_participation)

    return pred
