"""Game 1's start at the placement deadline (spec section 5): the complete
fleets play in the order they became complete, the dummies that never
placed are told ``left_out``; nobody joins or places once it runs."""

from __future__ import annotations

import time

from salvo.spec.rules import Placement
from salvo.tools.conformance.lobby import Game1
from salvo.tools.conformance.model import H, Model
from salvo.tools.conformance.place import FLEET_A, FLEET_B, FLEET_C
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import expect, obj


def deadline_start(s: Session, g: Game1) -> Model:
    t, obs = s.t, s.obs
    a, b, c = g.a, g.b, g.c
    at: float | None = None
    if g.last_join is not None:
        value = obj(g.last_join, t.deadline, ("at",))["at"]
        at = float(value) if isinstance(value, (int, float)) else None
    wait = max(0.0, at - time.time()) + 5 if at is not None else 15
    started = s.wait_state("turn", g.start, wait)
    order = [b.name, c.name, a.name]
    with s.case("start.deadline_exclusion"):
        if at is not None:
            expect(started.at >= at - 1.0, "the game started before the deadline")
        for dummy in g.dummies:
            s.error_after(t.player_error(dummy), g.start, timeout=3, code="left_out")
    with s.case("start.play_order_list"):
        obs.wait(s.list_is(order), after=g.start, what=f"/players/list = {order}")
        snap = s.snapshot([t.players_list, t.players_count])
        expect(s.players(snap.get(t.players_list)) == order, f"list should be play order {order}: {snap}")
        expect(snap.get(t.players_count) == "3", f"count should be 3: {snap}")
    if s.wanted("start.outside_lobby") or s.wanted("join.refusals"):
        with s.case("start.outside_lobby"):
            m2 = obs.mark()
            late = s.extra_team("late")
            rid = s.request_id()
            late.join(request_id=rid)
            s.join_refusal(late.name, rid, m2, "game_in_progress")
            m2 = obs.mark()
            a.place("carrier", Placement(5, 9, H))
            s.error_after(t.ship_error(a.name, "carrier"), m2, code="not_in_lobby")
    return Model({a.name: FLEET_A, b.name: FLEET_B, c.name: FLEET_C}, order=order)
