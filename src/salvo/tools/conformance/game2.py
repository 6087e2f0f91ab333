"""Game 2: garbage on every inbound topic (spec section 8), a lobby held
full by names that never place and freed at the deadline (section 5, v2),
the immediate start, and timeouts up to a drop (section 6)."""

from __future__ import annotations

import time

from salvo.net.watch import wait_until
from salvo.spec.rules import SHIP_IDS
from salvo.spec.topics import Outbound
from salvo.tools.conformance.lobby import fill_lobby
from salvo.tools.conformance.model import empty_cells_of, fleet_columns, fleet_rows
from salvo.tools.conformance.over import retained_json
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import Abort, CaseFailed, expect, field_is, json_or_none, obj

GARBAGE = [
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


def game2(s: Session) -> None:
    t, obs = s.t, s.obs
    a, b, _c = s.teams
    s.checkpoint()
    game_id = s.game_id()
    start = obs.mark()
    a.join()
    obs.wait(s.list_is([a.name]), after=start, what=f"/players/list = [{a.name!r}]")
    obs.wait_for(t.players_count, "1", after=start)
    if s.wanted("robust.garbage"):
        garbage(s)
    fleet_a, fleet_b = fleet_rows(0), fleet_columns(0)
    for ship, p in fleet_a.items():
        a.place(ship, p)
    for ship in SHIP_IDS:
        obs.wait_for(t.approved(a.name, ship), "true", after=start)

    # Dummies fill the lobby and never place; at the deadline they must go.
    filled = obs.mark()
    dummies, _joined = fill_lobby(s, "e", 1)
    deadline = obs.latest(t.deadline)
    at = obj(deadline, t.deadline, ("at",))["at"] if deadline is not None else None
    if not isinstance(at, (int, float)):
        raise Abort(f"no placement deadline in the lobby of game 2: {deadline.text if deadline else None!r}")
    with s.case("start.squatters"):
        for dummy in dummies:
            s.error_after(t.player_error(dummy), filled, timeout=max(0.0, at - time.time()) + 3, code="left_out")
        obs.wait(s.list_is([a.name]), after=filled, timeout=3, what=f"/players/list = [{a.name!r}] after the deadline")
        obs.wait_for(t.players_count, "1", after=filled, timeout=3)
        snap = s.snapshot([t.players_list, t.players_count])
        expect(s.players(snap.get(t.players_list)) == [a.name], f"the list should be [{a.name!r}]: {snap}")
        expect(snap.get(t.players_count) == "1", f"the count should be 1: {snap}")
        m2 = obs.mark()
        b.join()  # the lobby that was full has room again
        obs.wait(s.list_is([a.name, b.name]), after=m2, timeout=5, what=f"{b.name} let into the lobby freed up")
    with s.case("start.too_few"):
        time.sleep(max(0.0, at + 1.0 - time.time()))
        expect(not obs.on(t.state, after=filled), f"/game/state changed: {[m.text for m in obs.on(t.state, filled)]}")
        snap = s.snapshot([t.state]) if obs.mqtt5 and obs.latest(t.state) else s.retained([t.state])
        expect(snap.get(t.state) == "lobby", f"the lobby should stay open: {snap}")
        told = [m.text[:120] for m in obs.on(t.player_error(a.name), after=start)]
        expect(not told, f"{a.name}, whose fleet was complete, was told {told[:1]}")
    if b.name not in s.players(_latest(s, t.players_list)):
        m2 = obs.mark()
        b.join()
        obs.wait(s.list_is([a.name, b.name]), after=m2, timeout=5, what=f"{b.name} in the lobby")
    m2 = obs.mark()
    for ship in SHIP_IDS:
        b.place(ship, fleet_b[ship])
    with s.case("start.all_ready"):
        s.wait_state("turn", m2, timeout=3)
    first = obj(obs.wait(lambda m: m.topic == t.turn and bool(m.payload), after=m2), t.turn, ("player",))
    idle = next((x for x in (a, b) if x.name == first["player"]), None)
    if idle is None:
        raise Abort(f"game 2's first turn names {first['player']!r}")
    active = b if idle is a else a
    fleets = {a.name: fleet_a, b.name: fleet_b}
    empty_of = {n: empty_cells_of(f) for n, f in fleets.items()}
    salvo = None
    with s.case("robust.continues"):
        # the idle player fires one shot, then lets the turn time out
        m3 = obs.mark()
        x, y = empty_of[active.name][0]
        t0 = time.time()
        idle.fire(active.name, x, y, 1, game_id)
        salvo = obs.wait(field_is(t.salvo, "turn", 1), after=m3, timeout=15, what="the first salvo")
        s.learned["turn"] = time.time() - t0
    with s.case("timeout.partial"):
        expect(salvo is not None, "no salvo")
        assert salvo is not None
        result = obj(salvo, t.salvo)
        expect(result.get("shots") == 1 and result.get("player") == idle.name, f"salvo {salvo.text}")
    with s.case("timeout.drop"):
        missed, turn_no = 0, 1
        while True:
            turn_no += 1
            msg = obs.wait(s.turn_or_over(turn_no), after=m3, timeout=15, what=f"turn {turn_no}")
            if msg.topic == t.state:
                break
            info = obj(msg, t.turn, ("player", "shots"))
            if info["player"] == active.name:
                shots = info["shots"] if isinstance(info["shots"], int) else 0
                for k in range(min(shots, 5)):
                    ex, ey = empty_of[idle.name][k + turn_no]
                    active.fire(idle.name, ex, ey, turn_no, game_id)
            else:
                missed += 1
            if turn_no > 30:
                raise CaseFailed("the idle player was never dropped")
        expect(missed >= 1, "dropped without missing a turn")
        s.learned["max_missed_turns"] = missed
        snap = s.snapshot([t.defeated(idle.name), t.winner, t.stats_player(idle.name)])
        expect(snap.get(t.defeated(idle.name)) == "true", f"{idle.name} should be defeated (retained)")
        expect(snap.get(t.winner) == active.name, f"winner should be {active.name}: {snap.get(t.winner)}")
        stats = retained_json(snap, t.stats_player(idle.name))
        expect(stats.get("reason") == "timeout", f"{idle.name}'s stats should say reason timeout: {stats}")
    over = obs.latest(t.state)
    if over is not None and over.text == "over":
        s.wait_state("lobby", s.index(over), timeout=30)


def _latest(s: Session, topic: str) -> str | None:
    msg = s.obs.latest(topic)
    return msg.text if msg is not None else None


def garbage(s: Session) -> None:
    t, obs = s.t, s.obs
    a, b, _c = s.teams
    before = obs.mark()
    with s.case("robust.garbage"):
        topics = [t.request_participation, t.place(a.name, "carrier"), t.fire(b.name), t.fire(a.name)]
        for topic in topics:
            for payload in GARBAGE:
                obs.publish(topic, payload)
        n = len(GARBAGE) * len(topics)

        def reports() -> int:
            return sum(1 for m in obs.since(before) if s.is_error_topic(m.topic))

        wait_until(lambda: reports() >= n, 10, what=f"{n} error reports")
        time.sleep(0.3)
        expect(reports() == n, f"{reports()} reports for {n} garbage messages")
        changed = [
            m.topic
            for m in obs.since(before)
            if m.topic in (t.players_list, t.players_count, t.state)
            or (s.kind(m.topic) is Outbound.APPROVED and m.payload == b"true")
        ]
        expect(not changed, f"garbage changed {changed}")
        bad = [m.text[:120] for m in obs.since(before) if s.is_error_topic(m.topic) and not _is_report(m.payload)]
        expect(not bad, f"an error report is not JSON {{topic, error, code}}: {bad[:1]}")


def _is_report(payload: bytes) -> bool:
    value = json_or_none(payload)
    return isinstance(value, dict) and {"topic", "error", "code"} <= set(value)
