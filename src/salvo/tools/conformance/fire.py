"""Fire messages the referee must refuse, and where it must say so (spec
sections 3 and 6): unparsable, unsigned by any player, not matching their
data, bound to another turn, target or game, unbound (v1), off the board,
at nobody, from a player whose turn it is not; a refused signature sent
again (replayed); an accepted one delivered again (ignored)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

from salvo.net.watch import Msg, wait_until
from salvo.spec import crypto
from salvo.spec.rules import BOARD_SIZE
from salvo.spec.topics import Outbound
from salvo.tools.conformance.harness import Team, fire_data
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import NoReply, error_report, expect, json_or_none

#: Where the message for a later turn aims: game 1's plan fires at ship cells
#: and the first empty cells, never here before that turn comes.
SPARE_CELL = (BOARD_SIZE - 1, BOARD_SIZE - 1)


@dataclass(frozen=True)
class Replay:
    """A message refused on turn 1 (signed for a later turn of the same
    shooter) that must be refused as ``replayed`` when that turn comes."""

    turn: int
    shooter: str
    topic: str
    payload: str


def bad_messages(s: Session, team: Team, other: Team, third: Team, turn: int, game: str, players: int) -> Replay:
    """Turn 1: every kind of bad fire message, sent back to back (the turn
    clock runs), each refused on /game/errors when no player's key opens it,
    else on the sender's (the current player's) error topic. A referee
    handles one publisher's messages in order, so the reports on each topic
    are matched to the messages by position."""
    t, obs = s.t, s.obs
    target, mine, public = other.name, t.player_error(team.name), t.errors

    def bound(x: int, **changes: object) -> dict[str, object]:
        return {**fire_data(target, x, 1, turn, game), **changes}

    # Each message that could pass for a shot aims at a cell of its own, so a
    # hit it wrongly causes tells which one it was.
    outsider = json.dumps(crypto.sign(os.urandom(32), bound(1)))
    mismatch = json.loads(team.signed(bound(7)))
    mismatch["data"] = bound(2)
    later = turn + players  # the shooter's next turn, while nobody is defeated
    future = team.signed(fire_data(target, *SPARE_CELL, later, game))
    other_game = ("0" if game[:1] != "0" else "1") + game[1:]
    nobody = f"conf{s.tag}nobody"
    bad: list[tuple[str, str, str, str, str]] = [  # case, topic, payload, where reported, code
        ("fire.bad_json", t.fire(target), '{"data": {"x": 1, "y": 1}, "signature": ', public, "malformed"),
        ("fire.bad_signature", t.fire(target), outsider, public, "bad_signature"),
        ("fire.data_mismatch", t.fire(target), json.dumps(mismatch), mine, "bad_signature"),
        ("fire.wrong_turn", t.fire(target), future, mine, "wrong_turn"),
        ("fire.wrong_target", t.fire(target), team.signed(bound(3, target=third.name)), mine, "wrong_target"),
        ("fire.wrong_game", t.fire(target), team.signed(bound(4, game=other_game)), mine, "wrong_game"),
        ("fire.unbound", t.fire(target), team.signed({"x": 5, "y": 1}), mine, "malformed"),
        ("fire.off_board", t.fire(target), team.signed(bound(BOARD_SIZE)), mine, "off_board"),
        ("fire.off_board", t.fire(target), team.signed(bound(0, y=-1)), mine, "off_board"),
        ("fire.off_board", t.fire(target), team.signed(bound(0, y=BOARD_SIZE)), mine, "off_board"),
        ("fire.unknown_target", t.fire(nobody), team.signed(bound(6, target=nobody)), mine, "unknown_target"),
    ]
    by_cell = {
        (1, 1): "fire.bad_signature",
        (2, 1): "fire.data_mismatch",
        (7, 1): "fire.data_mismatch",
        SPARE_CELL: "fire.wrong_turn",
        (3, 1): "fire.wrong_target",
        (4, 1): "fire.wrong_game",
        (5, 1): "fire.unbound",
        (6, 1): "fire.unknown_target",
    }
    m2 = obs.mark()
    for _case, topic, payload, _where, _code in bad:
        team.conn.publish(topic, payload)
    want = {where: sum(b[3] == where for b in bad) for where in (public, mine)}
    with contextlib.suppress(NoReply):
        wait_until(lambda: all(len(_reports(s, w, m2)) >= n for w, n in want.items()), 5)
    # Each message must have its own report: one with its topic and code.
    # Matched by content, not position, so one wrong answer is one failure.
    unmatched = {where: [json_or_none(m.payload) for m in _reports(s, where, m2)] for where in want}
    for i, (case_id, topic, payload, where, code) in enumerate(bad):
        left = unmatched[where]
        k = next(
            (k for k, v in enumerate(left) if isinstance(v, dict) and (v.get("topic"), v.get("code")) == (topic, code)),
            None,
        )
        if k is not None:
            report = left.pop(k)
            echo = names_shot(topic, payload, public=where == public)
            got = {key: report.get(key) for key in echo}
            s.note("fire.names_shot", got == echo, f"message {i + 1} ({code}): {got} should be {echo}")
        others = [f"{v.get('code')}" if isinstance(v, dict) else repr(v) for v in left]
        s.note(
            case_id,
            k is not None,
            f"message {i + 1} of the bad batch: no {code} report for {topic} on {where} (left there: {others})",
        )
    for m in obs.since(m2):
        if s.kind(m.topic) is Outbound.HIT:
            hit = json_or_none(m.payload)
            cell = (hit.get("x"), hit.get("y")) if isinstance(hit, dict) else None
            culprits = [by_cell[cell]] if cell in by_cell else [b[0] for b in bad]
            for case_id in culprits:
                s.note(case_id, False, f"a message that must be refused was a shot: {m.topic} {m.text[:80]}")
    s.settle(*dict.fromkeys(b[0] for b in bad), "fire.names_shot")
    return Replay(later, team.name, t.fire(target), future)


def names_shot(topic: str, payload: str, public: bool) -> dict[str, object]:
    """(v2.1) What a refusal of ``payload`` on fire ``topic`` must echo: on
    the sender's own error topic, the signature (16 characters) and, when its
    data has integer x and y, its shot at the topic's target; on the public
    /game/errors neither key (both None): nobody's key vouches for it, and an
    echo there would let anyone "refuse" any cell in a team's name."""
    if public:
        return {"signature": None, "shot": None}
    sent = json_or_none(payload.encode())
    data = sent.get("data") if isinstance(sent, dict) else None
    signature = sent.get("signature") if isinstance(sent, dict) else None
    if data is None or not isinstance(signature, str):
        return {"signature": None, "shot": None}
    shot = None
    if isinstance(data, dict) and type(data.get("x")) is int and type(data.get("y")) is int:
        shot = {"target": topic.split("/")[-2], "x": data["x"], "y": data["y"]}
    return {"signature": signature[:16], "shot": shot}


def _reports(s: Session, topic: str, after: int) -> list[Msg]:
    return [m for m in s.obs.since(after) if m.topic == topic and m.payload]


def out_of_turn(s: Session, team: Team, other: Team, turn: int, game: str) -> None:
    """Attribution: ``other`` (not current) fires, correctly signed: the
    refusal goes to ``other``'s own error topic, not the current player's."""
    t, obs = s.t, s.obs
    with s.case("fire.out_of_turn"):
        m3 = obs.mark()
        other.fire(team.name, 0, 0, turn, game)
        report = s.error_after(t.player_error(other.name), m3, code="not_current_player")
        expect(report["topic"] == t.fire(team.name), f"the report should name the fire topic: {report}")
        expect(not obs.on(t.hit(team.name), after=m3), "a shot of a player not on turn was accepted")
        wrong = [m.text[:160] for m in obs.on(t.player_error(team.name), after=m3)]
        expect(not wrong, f"the current player {team.name} was told about another's shot: {wrong[:1]}")


Shots = list[tuple[str, int, int]]


def replay_verdict(s: Session, replay: Replay, after: int, accepted: Shots, planned: Shots) -> None:
    """After the salvo the replayed message was sent in: refused as
    ``replayed`` on its sender's topic, and not a shot (the hits are the
    planned shots')."""
    t = s.t
    with s.case("fire.replay"):
        msg = s.obs.wait(
            lambda m: m.topic == t.player_error(replay.shooter) and bool(m.payload), after, 2.0, what="a refusal"
        )
        report = error_report(msg)
        expect(
            report["code"] == "replayed" and report["topic"] == replay.topic,
            f"a refused signature sent again when it would be valid must be refused as replayed: {msg.text[:200]}",
        )
        expect(accepted == planned, f"hits {accepted} for the shots {planned}: the replayed message was a shot")


def redelivery_verdict(s: Session, shooter: str, since: list[Msg], accepted: Shots, planned: Shots) -> None:
    """An accepted shot delivered again (``since``: what the referee sent
    from then to the next turn): neither an error nor a second shot."""
    t = s.t
    with s.case("fire.redelivery"):
        expect(accepted == planned, f"hits {accepted} for the shots {planned}: the redelivery was a second shot")
        errors = [m.text[:200] for m in since if m.topic == t.player_error(shooter)]
        expect(not errors, f"a redelivered accepted shot got an error: {errors[:1]}")
