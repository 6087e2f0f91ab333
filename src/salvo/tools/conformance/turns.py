"""Game 1's turns (spec section 6): each turn's announcement, the salvo the
script fires, the bad messages of turn 1, and what the end of each salvo
must publish, in order. The model follows the shots the referee accepted
(its hit messages), so one wrong answer does not make every later one look
wrong."""

from __future__ import annotations

import time

from salvo.net.watch import Msg
from salvo.spec.topics import Outbound
from salvo.tools.conformance import fire
from salvo.tools.conformance.lobby import Game1
from salvo.tools.conformance.model import Model
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import Abort, expect, field_is, obj

SETTLED_AT_THE_END = (
    "turn.announce",
    "turn.order",
    "turn.allowance",
    "turn.skip_defeated",
    "fire.hit_topic",
    "fire.hit_payload",
    "fire.hit_game",
    "fire.hit_rule",
    "salvo.counts",
    "salvo.sinks_at_end",
    "salvo.order",
    "fire.not_counted",
)


def play(s: Session, g: Game1, model: Model) -> None:
    t, obs = s.t, s.obs
    teams = {team.name: team for team in (g.a, g.b, g.c)}
    names = (g.a.name, g.b.name, g.c.name)
    expected: str | None = None
    replay: fire.Replay | None = None
    redelivered = self_tested = False
    turn_no = 0
    while True:
        turn_no += 1
        s.checkpoint()
        msg = obs.wait(field_is(t.turn, "turn", turn_no), after=g.start, what=f"/game/turn for turn {turn_no}")
        info = obj(msg, t.turn, ("turn", "player", "shots"))
        shooter, allowed = info["player"], info["shots"]
        current = obs.wait(lambda m: m.topic == t.current, after=s.index(msg), what=t.current)
        s.note("turn.announce", current.text == shooter, f"/game/current {current.text!r} != {shooter!r}")
        if obs.mqtt5:  # retain-as-published: the flag is the referee's
            s.note("turn.announce", msg.retain and current.retain, "/game/turn or /game/current not retained")
        if turn_no == 1:
            s.note("turn.order", shooter in model.order, f"first player {shooter!r} is not a participant")
        else:
            s.note("turn.order", shooter == expected, f"turn {turn_no}: {shooter!r} played, {expected!r} expected")
        if shooter not in model.order:
            raise Abort(f"turn {turn_no}: /game/turn names {shooter!r}, not a player of this game")
        s.note("turn.skip_defeated", shooter not in model.defeated, f"defeated {shooter!r} got a turn")
        s.note(
            "turn.allowance",
            allowed == model.afloat(shooter),
            f"turn {turn_no}: {allowed} shots allowed, {model.afloat(shooter)} ships afloat",
        )
        team = teams[shooter]
        shots = model.plan(names, shooter, model.afloat(shooter))  # what the rules allow, whatever was announced
        mark = obs.mark()
        if turn_no == 1:
            other = next(x for x in teams.values() if x.name != shooter)
            third = next(x for x in teams.values() if x.name not in (shooter, other.name))
            replay = fire.bad_messages(s, team, other, third, turn_no, g.game_id, len(model.order))
            s.checkpoint()
            if s.wanted("fire.out_of_turn"):
                fire.out_of_turn(s, team, other, turn_no, g.game_id)
        replay_at = None
        if replay is not None and turn_no == replay.turn:
            if shooter == replay.shooter:
                replay_at = obs.mark()
                team.conn.publish(replay.topic, replay.payload)
            else:
                why = f"turn {turn_no} was {shooter}'s, not {replay.shooter}'s: see turn.order"
                s.record("fire.replay", "fail", why)
        if g.c.name in model.defeated and "fire.defeated_target" not in s.results:
            with s.case("fire.defeated_target"):
                m2 = obs.mark()
                team.fire(g.c.name, 0, 0, turn_no, g.game_id)
                s.error_after(t.player_error(shooter), m2, code="defeated_target")
        redelivery_at = None
        for i, (target, x, y) in enumerate(shots):
            if i == len(shots) - 1 and turn_no == 1:
                time.sleep(0.3)  # had a refused message counted, the salvo would be over now
                ended = [m for m in obs.since(mark) if m.topic == t.salvo]
                s.note("fire.not_counted", not ended, "the salvo ended before all valid shots were sent")
            sent = team.fire(target, x, y, turn_no, g.game_id)
            if i == 0 and not redelivered and len(shots) > 1:
                redelivered = True
                obs.wait(lambda m: m.topic == t.hit(target), after=mark, what="the first hit")  # noqa: B023
                redelivery_at = obs.mark()
                team.conn.publish(t.fire(target), sent)  # the same message again, as a broker redelivers
        salvo = obs.wait(field_is(t.salvo, "turn", turn_no), after=mark, what=f"/game/salvo of turn {turn_no}")
        upto = s.index(salvo)
        accepted = [
            (route.name, *_xy(m))
            for m in obs.since(mark)[: upto - mark]
            if (route := s.route(m.topic)) is not None and route.kind is Outbound.HIT
        ]
        hits, sunk, defeated = model.apply(shooter, turn_no, accepted)
        end = obs.wait(s.turn_or_over(turn_no + 1), after=mark, what="the next turn or the end")
        check_salvo(s, mark, s.index(end), shooter, turn_no, shots, hits, sunk, defeated, salvo, g.game_id)
        valid = obj(salvo, t.salvo).get("shots")
        s.note("fire.not_counted", turn_no > 1 or valid == len(shots), f"turn 1: {valid} of {len(shots)} shots")
        if replay_at is not None and replay is not None:
            fire.replay_verdict(s, replay, replay_at, accepted, shots)
        if redelivery_at is not None:
            since = obs.since(redelivery_at)[: s.index(end) - redelivery_at]
            fire.redelivery_verdict(s, shooter, since, accepted, shots)
        if shooter == g.c.name and not self_tested and g.c.name not in model.defeated:
            self_tested = True
            with s.case("fire.self"):
                got = [m for m in obs.since(mark) if m.topic == t.hit(g.c.name)]
                expect(len(got) == len(shots), f"{len(got)} of {len(shots)} self-shots reached /players/{g.c.name}/hit")
        if end.topic == t.state:
            break
        expected = model.next_after(shooter)
        if turn_no > 60:
            raise Abort("game 1 did not end within 60 turns")
    s.settle(*SETTLED_AT_THE_END)


def _xy(m: Msg) -> tuple[int, int]:
    hit = obj(m, "a hit", ("x", "y"))
    x, y = hit["x"], hit["y"]
    expect(type(x) is int and type(y) is int, f"{m.topic}: x and y must be integers: {m.text[:120]}")
    return x, y


def check_salvo(
    s: Session,
    mark: int,
    end: int,
    shooter: str,
    turn: int,
    shots: list[tuple[str, int, int]],
    hits: int,
    sunk: set[tuple[str, str]],
    defeated: set[str],
    salvo: Msg,
    game: str,
) -> None:
    t = s.t
    msgs = [
        m
        for m in s.obs.since(mark)[: end + 1 - mark]
        if t.owns(m.topic)
        and not s.is_inbound_topic(m.topic)
        and m.topic != t.deadline
        and not s.is_error_topic(m.topic)
    ]
    hit_msgs = [m for m in msgs if s.kind(m.topic) is Outbound.HIT]
    got = [(m.topic, *_xy(m)) for m in hit_msgs]
    want = [(t.hit(tg), x, y) for tg, x, y in shots]
    s.note("fire.hit_topic", got == want, f"turn {turn}: hit messages {got} != {want}")
    s.note("fire.hit_topic", not any(m.retain for m in hit_msgs), f"turn {turn}: a hit message was retained")
    # ``game``: the id the shots were signed for, not the latest /game/id
    # seen (a reset may have published the next one meanwhile)
    for k, m in enumerate(hit_msgs, start=1):
        hit = obj(m, "a hit")
        ok = set(hit) >= {"x", "y", "turn", "shot"} and hit["turn"] == turn and hit["shot"] == k
        s.note("fire.hit_payload", ok, f"turn {turn}: hit {k} of the salvo is {m.text[:120]}")
        s.note("fire.hit_game", hit.get("game") == game, f"turn {turn}: hit {k} is not of game {game}: {m.text[:120]}")
    result = obj(salvo, t.salvo)
    if len({(x, y, tg) for tg, x, y in shots}) < len(shots):
        s.note("fire.hit_rule", result.get("hits") == hits, f"turn {turn}: repeated hit not counted")
    s.note(
        "salvo.counts",
        result == {"turn": turn, "player": shooter, "shots": len(shots), "hits": hits},
        f"turn {turn}: /game/salvo {salvo.text} (expected {len(shots)} shots, {hits} hits)",
    )
    s.note("salvo.counts", salvo.retain or not s.obs.mqtt5, f"turn {turn}: /game/salvo not retained")
    rest = [m for m in msgs if s.kind(m.topic) is not Outbound.HIT]
    topics = [m.topic for m in rest]
    i = topics.index(t.hits) if t.hits in topics else -1
    s.note(
        "salvo.counts",
        i >= 0 and rest[i].text == str(hits) and not rest[i].retain,
        f"turn {turn}: /game/hits missing, wrong or retained",
    )
    first_sink = next((k for k, m in enumerate(msgs) if s.kind(m.topic) is Outbound.SUNK), None)
    last_hit = max((k for k, m in enumerate(msgs) if s.kind(m.topic) is Outbound.HIT), default=-1)
    s.note(
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
    while k < len(seq) and (route := s.route(seq[k])) is not None and route.kind is Outbound.SUNK:
        sunk_seen.add((route.name, route.ship))
        k += 1
    defeated_seen = set()
    while k < len(seq) and (route := s.route(seq[k])) is not None and route.kind is Outbound.DEFEATED:
        defeated_seen.add(route.name)
        k += 1
    nxt = seq[k] if k < len(seq) else ""
    ok = (
        ok
        and sunk_seen == sunk
        and defeated_seen == defeated
        and nxt in (t.turn, t.current, t.winner, t.state, t.stats_summary)
    )
    s.note(
        "salvo.order",
        ok,
        f"turn {turn}: end of salvo was {seq[: k + 1]}; sinks {sorted(sunk)}, defeats {sorted(defeated)} expected",
    )
