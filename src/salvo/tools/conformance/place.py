"""Game 1's placements (spec section 5): b and c complete their fleets at
once, a tries every kind of bad placement first and completes last, so the
play order is b, c, a."""

from __future__ import annotations

from collections.abc import Callable

from salvo.spec import crypto
from salvo.spec.rules import SHIP_IDS, Placement
from salvo.tools.conformance.harness import team_key
from salvo.tools.conformance.lobby import Game1
from salvo.tools.conformance.model import H, fleet_columns, fleet_rows
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import Abort, expect

BODY = '{"coordinates":"%s","orientation":"%s"}'

#: a's final fleet (it moves its carrier there on the way)
FLEET_A = {
    "carrier": Placement(0, 9, H),
    "battleship": Placement(0, 1, H),
    "destroyer": Placement(0, 0, H),
    "submarine": Placement(0, 3, H),
    "patrolboat": Placement(0, 5, H),
}
FLEET_B, FLEET_C = fleet_columns(5), fleet_rows(5)


def placements(s: Session, g: Game1) -> None:
    t, obs = s.t, s.obs
    a, b, c = g.a, g.b, g.c
    mark = obs.mark()
    for ship, p in FLEET_B.items():
        b.place(ship, p)
    for ship, p in FLEET_C.items():
        c.place(ship, p)
    approved = t.approved
    with s.case("place.approved"):
        for ship in SHIP_IDS:
            obs.wait_for(approved(b.name, ship), "true", after=mark)
        snap = s.snapshot([approved(b.name, ship) for ship in SHIP_IDS])
        expect(all(snap.get(approved(b.name, ship)) == "true" for ship in SHIP_IDS), f"approved not retained: {snap}")
    for ship in SHIP_IDS:
        obs.wait_for(approved(c.name, ship), "true", after=mark)

    def rejected(ship: str, send: Callable[[], object], *codes: str) -> str:
        """Send a bad placement of a's ``ship``: its reason, with one of ``codes``."""
        m2 = obs.mark()
        send()
        report = s.error_after(t.ship_error(a.name, ship), m2)
        expect(report["code"] in codes, f"code should be {' or '.join(codes)}: {report}")
        s.quiet(lambda m: m.topic == approved(a.name, ship) and m.payload == b"true", m2, 0.1)
        return str(report["error"])

    with s.case("place.wrong_secret"):
        other = team_key(a.name, "not-the-secret")
        body = BODY % ("0;3", "HORIZONTAL")
        rejected("submarine", lambda: a.place_raw("submarine", body, key=other), "cannot_decrypt")
    with s.case("place.approved_false"):
        snap = s.snapshot([approved(a.name, "submarine")])
        expect(snap.get(approved(a.name, "submarine")) == "false", f"approved should stay 'false' (retained): {snap}")
    with s.case("place.malformed"):
        # Not even base64: undecodable, which a referee may call either.
        not_b64 = lambda: a.conn.publish(t.place(a.name, "carrier"), "!!not base64!!")  # noqa: E731
        rejected("carrier", not_b64, "malformed", "cannot_decrypt")
        rejected("carrier", lambda: a.place_raw("carrier", "not json"), "malformed")
        rejected("carrier", lambda: a.place_raw("carrier", '{"coordinates":"0;0"}'), "malformed")
    with s.case("place.unknown_ship"):
        rejected("canoe", lambda: a.place_raw("canoe", BODY % ("0;0", "HORIZONTAL")), "unknown_ship")
    with s.case("place.off_board"):
        rejected("carrier", lambda: a.place_raw("carrier", BODY % ("6;0", "HORIZONTAL")), "off_board")
        rejected("carrier", lambda: a.place_raw("carrier", BODY % ("0;6", "VERTICAL")), "off_board")
        rejected("carrier", lambda: a.place_raw("carrier", BODY % ("-1;0", "HORIZONTAL")), "off_board")
    with s.case("place.approved"):
        m2 = obs.mark()
        a.place("carrier", Placement(0, 0, H))
        obs.wait_for(approved(a.name, "carrier"), "true", after=m2)
    with s.case("place.overlap"):
        reason = rejected("battleship", lambda: a.place_raw("battleship", BODY % ("2;0", "VERTICAL")), "overlap")
        expect("0;0" not in reason and "(0, 0)" not in reason, f"the reason names the carrier's cells: {reason!r}")
    with s.case("place.encodings"):
        m2 = obs.mark()
        a.place_raw("battleship", '{"coordinates":{"x":0,"y":1},"Orientation":"horizontal"}')
        obs.wait_for(approved(a.name, "battleship"), "true", after=m2)
    with s.case("place.move"):
        m2 = obs.mark()
        a.place("carrier", FLEET_A["carrier"])  # moved: its old cells are free again
        obs.wait_for(approved(a.name, "carrier"), "true", after=m2)
        m2 = obs.mark()
        a.place("destroyer", FLEET_A["destroyer"])
        obs.wait_for(approved(a.name, "destroyer"), "true", after=m2)
        rejected("patrolboat", lambda: a.place_raw("patrolboat", BODY % ("1;8", "VERTICAL")), "overlap")
    with s.case("place.not_joined"):
        ghost = f"conf{s.tag}ghost"
        m2 = obs.mark()
        obs.publish(t.place(ghost, "carrier"), crypto.seal(team_key(ghost, "g"), BODY % ("0;0", "HORIZONTAL")))
        s.error_after(t.ship_error(ghost, "carrier"), m2, code="not_joined")
    # Whatever failed above, a's fleet is completed now: the game must go on.
    m2 = obs.mark()
    for ship, p in FLEET_A.items():
        a.place(ship, p)
    for ship in SHIP_IDS:
        obs.wait_for(approved(a.name, ship), "true", after=m2)
    if obs.on(t.state, after=g.start):
        raise Abort("the game started before the suite had placed its fleets: give it a longer placement timeout")
