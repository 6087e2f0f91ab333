"""The protocol layer's v2 rules, without a broker: raw messages in, effects
out (tests/kit.py's ArenaDriver plays the adapter). Who a fire message is
from, what it is bound to, which nonces are spent, and where every refusal
goes."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from nacl.secret import SecretBox

from salvo.arena.arena import WRONG_SECRET_COOLDOWN_S, DeriveKey
from salvo.game.engine import EARLIER_GAMES, PLACEMENTS_CAP
from salvo.game.events import Burn, Fire, Join, Phase, Tick
from salvo.spec import crypto
from salvo.spec.errors import Code, Illegal
from salvo.spec.payloads import Publish
from salvo.spec.rules import Orientation, Placement

from kit import COLUMNS, ROWS, ArenaDriver, all_cells, spent, without_spent

FLEETS = {"alice": ROWS, "bob": COLUMNS, "carol": ROWS}


def playing() -> ArenaDriver:
    d = ArenaDriver(seed=3)
    d.start(FLEETS)
    return d


def water(d: ArenaDriver, target: str) -> tuple[int, int]:
    """A cell of ``target``'s board with no ship on it."""
    taken = set(all_cells(FLEETS[target]))
    return next((x, y) for y in range(10) for x in range(10) if (x, y) not in taken)


def others(d: ArenaDriver) -> list[str]:
    return [n for n in FLEETS if n != d.game.current]


# -- attribution -------------------------------------------------------------------------


def test_a_shot_is_the_current_players_when_their_key_opens_it() -> None:
    d = playing()
    me, target = d.game.current, others(d)[0]
    assert me is not None
    x, y = water(d, target)
    out = d.fire(me, target, x, y)
    assert [(p.topic, json.loads(p.payload)) for p in out] == [
        (d.t.hit(target), {"x": x, "y": y, "turn": 1, "shot": 1, "game": d.game.game_id})
    ]
    (shot,) = d.records
    assert isinstance(shot, Fire) and (shot.shooter, shot.turn, shot.game) == (me, 1, d.game.game_id)


def test_a_rejected_fire_is_reported_to_its_sender_and_only_there() -> None:
    d = playing()
    me, (other, third) = d.game.current, others(d)
    before = d.game.snapshot()
    out = d.fire(other, third, 0, 9)  # correctly signed and bound, but not other's turn
    assert d.errors(out) == {
        d.t.player_error(other): {
            "topic": d.t.fire(third),
            "error": f"not your turn: it is {me}'s",
            "code": "not_current_player",
            # (v2.1) which shot: its signature's start as sent, its target and cell
            "signature": json.loads(d.payloads[-1])["signature"][:16],
            "shot": {"target": third, "x": 0, "y": 9},
        }
    }
    (burn,) = d.records
    assert isinstance(burn, Burn) and burn.player == other
    # the only trace: its nonce is spent for the game
    assert burn.code == "not_current_player"
    assert d.game.nonce_seen(other, burn.nonce) is False and d.game.players[other].burned == 1
    assert without_spent(d.game.snapshot()) == without_spent(before)


def test_a_signature_no_player_can_open_goes_to_game_errors_and_spends_nothing() -> None:
    d = playing()
    target = others(d)[0]
    forged = crypto.sign(crypto.derive_team_key("mallory", "m"), {"x": 1, "y": 1, "target": target})
    nonces = spent(d.game)
    report = d.errors(d.send(d.t.fire(target), json.dumps(forged)))[d.t.errors]
    assert report["code"] == "bad_signature" and "does not open" in report["error"]
    assert d.records == [] and spent(d.game) == nonces


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("not json", "malformed"),
        ('{"data": {"x": 1}}', "malformed"),
        ('{"data": {"x": 1}, "signature": "!!"}', "malformed"),
        ('{"data": {"x": 1}, "signature": "AAAA"}', "malformed"),
        ("x" * 4097, "too_large"),
    ],
)
def test_a_fire_message_without_an_opening_signature_cannot_be_attributed(payload: str, code: str) -> None:
    d = playing()
    out = d.send(d.t.fire(others(d)[0]), payload)
    assert list(d.errors(out)) == [d.t.errors] and d.errors(out)[d.t.errors]["code"] == code


def test_anyone_filling_the_current_players_error_topic_is_no_longer_possible() -> None:
    d = playing()
    me = d.game.current
    assert me is not None
    for payload in ("garbage", '{"data": {}, "signature": "AAAA"}'):
        out = d.send(d.t.fire(me), payload)
        assert d.t.player_error(me) not in d.errors(out)


# -- binding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"target": "carol"}, "wrong_target"),  # captured from carol's topic, sent at bob
        ({"turn": 2}, "wrong_turn"),
        ({"turn": 0}, "wrong_turn"),
        ({"game": "0123456789abcdef"}, "wrong_game"),  # another game, arena, journal or referee
    ],
)
def test_a_signature_is_good_for_its_own_target_turn_and_game_only(change: dict[str, object], code: str) -> None:
    d = ArenaDriver(seed=3)
    d.start({"alice": ROWS, "bob": COLUMNS, "carol": ROWS})
    me = d.game.current
    assert me is not None
    target = "bob" if me != "bob" else "alice"
    signed = d.signed_fire(me, target, 9, 9, **change)
    out = d.send(d.t.fire(target), signed)
    assert d.errors(out)[d.t.player_error(me)]["code"] == code
    assert d.game.fired == 0 and isinstance(d.records[-1], Burn)


def test_the_unbound_v1_form_is_refused_unless_the_referee_opts_in() -> None:
    for opt_in in (False, True):
        d = ArenaDriver(seed=3, unbound_fire=opt_in)
        d.start({"alice": ROWS, "bob": COLUMNS})
        me = d.game.current
        assert me is not None
        target = "bob" if me == "alice" else "alice"
        out = d.send(d.t.fire(target), json.dumps(crypto.sign(d.key(me), {"x": 9, "y": 9})))
        if opt_in:
            assert [p.topic for p in out] == [d.t.hit(target)]
        else:
            report = d.errors(out)[d.t.player_error(me)]
            assert report["code"] == "malformed" and "target" in report["error"]


# -- spent nonces ------------------------------------------------------------------------


def test_a_rejected_signature_stays_spent_when_its_moment_comes() -> None:
    d = ArenaDriver(seed=3)
    d.start({"alice": ROWS, "bob": COLUMNS})
    me = d.game.current
    assert me is not None
    target = "bob" if me == "alice" else "alice"
    early = d.signed_fire(me, target, 9, 9, turn=3)  # signed ahead for turn 3
    assert d.errors(d.send(d.t.fire(target), early))[d.t.player_error(me)]["code"] == "wrong_turn"
    while d.game.turn < 3:
        cur = d.game.current
        assert cur is not None
        tgt = "bob" if cur == "alice" else "alice"
        for _ in range(d.game.allowed):
            d.fire(cur, tgt, *water(d, tgt))
    assert d.game.current == me
    out = d.send(d.t.fire(target), early)  # now it would be good: but it was opened before
    assert d.errors(out)[d.t.player_error(me)]["code"] == "replayed"


def test_an_accepted_shot_delivered_again_is_ignored_in_silence() -> None:
    d = playing()
    me, target = d.game.current, others(d)[0]
    assert me is not None
    message = d.signed_fire(me, target, *water(d, target))
    assert [p.topic for p in d.send(d.t.fire(target), message)] == [d.t.hit(target)]
    before, records = d.game.snapshot(), list(d.records)
    assert d.send(d.t.fire(target), message) == []  # no error, no second shot
    assert d.game.snapshot() == before and d.records == records
    assert "delivered again" in d.logs[-1].line


def test_an_accepted_shot_sent_on_at_another_target_is_a_replay() -> None:
    d = playing()
    me, (target, other) = d.game.current, others(d)
    assert me is not None
    message = d.signed_fire(me, target, *water(d, target))
    d.send(d.t.fire(target), message)
    out = d.send(d.t.fire(other), message)  # not a redelivery: another topic
    assert d.errors(out)[d.t.player_error(me)]["code"] == "replayed"
    assert d.game.fired == 1


def test_nobody_can_spend_another_players_nonces() -> None:
    """A nonce is unique under one key only: one a team might use next (a
    counter is a valid choice) spent under another team's key stays usable."""
    d = playing()
    me, other = d.game.current, others(d)[0]
    assert me is not None
    x, y = water(d, other)
    mine = d.signed_fire(me, other, x, y)
    nonce = base64.b64decode(json.loads(mine)["signature"])[:24]
    box = SecretBox(d.key(other)).encrypt(b"garbage", nonce)  # the same nonce under the other key
    before = spent(d.game)
    d.send(d.t.fire(other), json.dumps({"data": "garbage", "signature": base64.b64encode(bytes(box)).decode()}))
    assert spent(d.game) == {**before, (other, nonce): False}
    assert [p.topic for p in d.send(d.t.fire(other), mine)] == [d.t.hit(other)]


def test_nonces_are_per_game_so_memory_stays_flat() -> None:
    d = ArenaDriver(seed=5, reset_after=1, turn_timeout=5)
    sizes = []
    for _ in range(3):
        d.start({"alice": ROWS, "bob": COLUMNS})
        todo = {"alice": all_cells(ROWS), "bob": all_cells(COLUMNS)}
        while d.game.phase is Phase.TURN:
            cur = d.game.current
            assert cur is not None
            tgt = "bob" if cur == "alice" else "alice"
            for _ in range(d.game.allowed):
                d.fire(cur, tgt, *(todo[tgt].pop() if todo[tgt] else water(d, tgt)))
        sizes.append(len(spent(d.game)))
        d.now += 2
        d.run(d.arena.on_tick(d.now))
        assert spent(d.game) == {} and d.game.phase is Phase.LOBBY
    assert sizes[0] > 0


def test_a_shot_of_the_previous_game_delivered_late_goes_to_its_sender_not_to_everybody() -> None:
    """A clustered broker redelivers an unacknowledged shot about 30 s after
    a node fails: into the next game, whose players cannot open it. Not a
    public forgery alarm: a private wrong_game to the team that sent it."""
    d = ArenaDriver(seed=5, reset_after=1, turn_timeout=5)
    d.start({"alice": ROWS, "bob": COLUMNS})
    shooter, target = _turn(d)
    late = d.signed_fire(shooter, target, 9, 9)  # in flight when the node failed
    todo = {"alice": all_cells(ROWS), "bob": all_cells(COLUMNS)}
    while d.game.phase is Phase.TURN:
        cur = d.game.current
        assert cur is not None
        tgt = "bob" if cur == "alice" else "alice"
        for _ in range(d.game.allowed):
            d.fire(cur, tgt, *(todo[tgt].pop() if todo[tgt] else water(d, tgt)))
    d.now += 2
    d.run(d.arena.on_tick(d.now))
    d.start({"carol": ROWS, "dave": COLUMNS})  # the next game: other teams
    before = d.game.snapshot()
    out = d.send(d.t.fire(target), late)
    assert list(d.errors(out)) == [d.t.player_error(shooter)]  # nothing on /game/errors
    report = d.errors(out)[d.t.player_error(shooter)]
    assert report["code"] == "wrong_game"
    # (v2.1) its sender's own refusal names the shot
    assert report["shot"] == {"target": target, "x": 9, "y": 9}
    assert report["signature"] == json.loads(late)["signature"][:16]
    assert d.game.snapshot() == before
    # a signature nobody of either game can open is still the public alarm, naming no shot
    forged = json.loads(late)
    forged["signature"] = base64.b64encode(b"\x01" * 64).decode()
    public = d.errors(d.send(d.t.fire(target), json.dumps(forged)))
    assert list(public) == [d.t.errors] and "shot" not in public[d.t.errors] and "signature" not in public[d.t.errors]


def _turn(d: ArenaDriver) -> tuple[str, str]:
    """Who shoots now in alice's and bob's game, and at whom."""
    shooter = d.game.current
    assert shooter is not None
    return shooter, "bob" if shooter == "alice" else "alice"


def _play_out(d: ArenaDriver, fleets: dict[str, dict[str, Placement]]) -> None:
    """Every turn hits the target's ships until one fleet is gone; then the reset."""
    a, b = fleets
    todo = {n: all_cells(f) for n, f in fleets.items()}
    while d.game.phase is Phase.TURN:
        cur = d.game.current
        assert cur is not None
        tgt = b if cur == a else a
        taken = set(all_cells(fleets[tgt]))
        sea = next((x, y) for y in range(10) for x in range(10) if (x, y) not in taken)
        for _ in range(d.game.allowed):
            d.fire(cur, tgt, *(todo[tgt].pop() if todo[tgt] else sea))
    d.now += 2
    d.run(d.arena.on_tick(d.now))


def test_a_shot_of_a_game_two_games_back_delivered_late_goes_to_its_sender_not_to_everybody() -> None:
    """JetStream redelivers an unacknowledged shot 30 s after a node fails;
    games of a few seconds go by meanwhile (salvo stress chaos --scenarios
    nats saw a shot of game 2 refused in game 5 as a public bad_signature).
    The keys of the last games tell it from a forgery."""
    d = ArenaDriver(seed=5, reset_after=1, turn_timeout=5)
    d.start({"alice": ROWS, "bob": COLUMNS})
    shooter, target = _turn(d)
    first = d.game.game_id
    late = d.signed_fire(shooter, target, 9, 9)  # in flight when the node failed
    _play_out(d, {"alice": ROWS, "bob": COLUMNS})
    for pair in (("carol", "dave"), ("erin", "frank")):  # two games of other teams
        d.start({pair[0]: ROWS, pair[1]: COLUMNS})
        _play_out(d, {pair[0]: ROWS, pair[1]: COLUMNS})
    d.start({"gina": ROWS, "hank": COLUMNS})
    before = d.game.snapshot()
    out = d.send(d.t.fire(target), late)
    assert list(d.errors(out)) == [d.t.player_error(shooter)]  # nothing on /game/errors
    report = d.errors(out)[d.t.player_error(shooter)]
    assert report["code"] == "wrong_game" and repr(first) in report["error"]
    assert report["shot"] == {"target": target, "x": 9, "y": 9}  # (v2.1) named to its sender
    assert d.game.snapshot() == before


def test_a_late_shot_is_told_to_its_sender_up_to_earlier_games_back_then_it_is_a_forgery() -> None:
    """The bound on the keys kept (EARLIER_GAMES): a shot of the game
    EARLIER_GAMES games back is still its sender's wrong_game; one game
    further back nobody's key kept opens it, and it is the public
    bad_signature alarm like any forgery."""
    assert EARLIER_GAMES == 8  # the figure docs/protocol.md and docs/reliability.md give
    d = ArenaDriver(seed=5, reset_after=1, turn_timeout=5)
    d.start({"alice": ROWS, "bob": COLUMNS})
    shooter, target = _turn(d)
    first = d.game.game_id
    late = d.signed_fire(shooter, target, 9, 9)
    _play_out(d, {"alice": ROWS, "bob": COLUMNS})
    for back in range(1, EARLIER_GAMES + 1):  # games of other teams, each its own pair
        pair = {f"a{back}": ROWS, f"b{back}": COLUMNS}
        d.start(pair)
        if back == EARLIER_GAMES:  # alice's and bob's game is EARLIER_GAMES back
            out = d.send(d.t.fire(target), late)
            assert list(d.errors(out)) == [d.t.player_error(shooter)]
            report = d.errors(out)[d.t.player_error(shooter)]
            assert report["code"] == "wrong_game" and repr(first) in report["error"]
        _play_out(d, pair)
    d.start({"carol": ROWS, "dave": COLUMNS})  # and now one further back
    before = d.game.snapshot()
    out = d.send(d.t.fire(target), late)
    assert list(d.errors(out)) == [d.t.errors]  # nothing on the sender's topic
    assert d.errors(out)[d.t.errors]["code"] == "bad_signature"
    assert d.game.snapshot() == before


def test_a_refused_shot_is_echoed_only_within_a_signed_32_bit_integer() -> None:
    """(v2.1, docs/protocol.md) A fire refusal on its sender's own topic
    names the shot's x and y as read, when each fits a signed 32-bit
    integer (a C client's ``int32_t``); a value past that is never echoed,
    as is or cut down: the report then names no shot at all."""
    d = ArenaDriver(seed=5)
    d.start({"alice": ROWS, "bob": COLUMNS})
    shooter, target = _turn(d)
    low, high = -(2**31), 2**31 - 1
    for x, y, shot in [
        (high, 0, {"target": target, "x": high, "y": 0}),
        (0, low, {"target": target, "x": 0, "y": low}),
        (high + 1, 0, None),
        (0, low - 1, None),
        (2**64, 2**64, None),
    ]:
        before = without_spent(d.game.snapshot())
        out = d.fire(shooter, target, x, y)
        assert list(d.errors(out)) == [d.t.player_error(shooter)], (x, y)
        report = d.errors(out)[d.t.player_error(shooter)]
        assert report["code"] == "off_board"
        assert report.get("shot") == shot, (x, y)
        assert without_spent(d.game.snapshot()) == before


# -- joins ---------------------------------------------------------------------------------


def test_every_refused_join_goes_to_game_errors_with_its_request_id_and_nothing_else() -> None:
    d = ArenaDriver(max_players=2, sealed_joins_only=False)
    d.join("ada")
    cases: list[tuple[Callable[[], list[Publish]], str]] = [
        (lambda: d.join("ada", "not-adas-secret", "r1"), "name_taken"),  # someone forging ada
        (lambda: d.send(d.t.request_participation, '{"name": "a/b", "secret": "s", "request_id": "r2"}'), "bad_name"),
        (lambda: d.send(d.t.request_participation, '{"name": "x", "secret": 5, "request_id": "r3"}'), "malformed"),
    ]
    for i, (send, code) in enumerate(cases, 1):
        out = send()
        assert [p.topic for p in out] == [d.t.errors], out
        report = json.loads(out[0].payload)
        assert (report["code"], report["request_id"]) == (code, f"r{i}")
        assert "not-adas-secret" not in out[0].payload
    d.join("bob")
    out = d.join("carol", request_id="r4")
    assert json.loads(out[0].payload)["code"] == "lobby_full"
    d.start({"ada": ROWS, "bob": COLUMNS})
    out = d.join("carol", request_id="r5")
    assert json.loads(out[0].payload) == {
        "topic": d.t.request_participation,
        "error": "game in progress (state turn); join when /game/state is lobby",
        "code": "game_in_progress",
        "request_id": "r5",
    }
    assert not [p for p in d.published if p.topic.endswith(("/ada/error", "/carol/error", "/x/error"))]


def test_a_sealed_only_referee_refuses_plain_joins_and_takes_sealed_ones() -> None:
    d = ArenaDriver(sealed_joins_only=True)
    out = d.join("ada", request_id="plain-1")
    report = json.loads(out[0].payload)
    assert (out[0].topic, report["code"], report["request_id"]) == (d.t.errors, "sealed_only", "plain-1")
    sealed = crypto.seal_to(d.arena.pubkey, json.dumps({"name": "ada", "secret": "ada-secret"}))
    d.send(d.t.request_participation, sealed)
    assert list(d.game.players) == ["ada"]


def test_one_derivation_per_name_at_a_time() -> None:
    d = ArenaDriver()
    d.defer_keys = True
    d.join("ada", "one", "a1")
    d.join("ada", "one", "a2")  # the same secret: waits for the same derivation
    out = d.join("ada", "two", "a3")  # another secret for the same name: busy, not derived
    assert json.loads(out[0].payload)["code"] == "busy" and out[0].topic == d.t.errors
    d.join("bob", "b", "b1")  # another name is not held up
    assert [(j.name, j.request_ids) for j in d.pending] == [("ada", ["a1", "a2"]), ("bob", ["b1"])]
    d.finish_keys()
    assert list(d.game.players) == ["ada", "bob"]


def test_a_flood_of_names_cannot_starve_a_team_beyond_the_global_cap() -> None:
    d = ArenaDriver(max_players=2)
    d.defer_keys = True
    for i in range(d.arena.max_pending):
        d.join(f"junk{i}")
    out = d.join("ada", request_id="late")
    assert json.loads(out[0].payload)["code"] == "busy"  # refused at once, on /game/errors
    d.finish_keys()  # the derivations end (two junk names fill the lobby: the rest get lobby_full)
    assert json.loads(d.published[-1].payload)["code"] == "lobby_full"


def test_a_wrong_secret_found_by_derivation_cools_the_name_down() -> None:
    refuse = Illegal(Code.WRONG_SECRET, "wrong secret for team 'ada'")
    d = ArenaDriver(admit=lambda name, secret: None)  # an old registry: only derivation can tell
    d.defer_keys = True
    d.join("ada", "guess-1", "g1")
    out = d.finish_keys(wrong=lambda job: refuse)
    assert json.loads(out[0].payload)["code"] == "wrong_secret"
    out = d.join("ada", "guess-2", "g2")  # within the cool-down: refused without deriving
    assert json.loads(out[0].payload)["code"] == "busy" and d.pending == []
    out = d.join("ada", "guess-1", "g3")  # a secret known to be wrong: refused at once, always
    assert json.loads(out[0].payload)["code"] == "wrong_secret" and d.pending == []
    d.now += WRONG_SECRET_COOLDOWN_S
    d.join("ada", "ada-secret", "g4")
    assert [j.request_ids for j in d.pending] == [["g4"]]


def test_a_registry_that_verifies_at_once_needs_no_derivation_for_wrong_secrets() -> None:
    def admit(name: str, secret: str) -> bool | None:
        if secret != f"{name}-secret":
            raise Illegal(Code.WRONG_SECRET, f"wrong secret for team {name!r}")
        return True

    d = ArenaDriver(admit=admit)
    d.defer_keys = True
    for i in range(50):  # a flood of guesses for ada's name
        out = d.join("ada", f"guess-{i}")
        assert json.loads(out[0].payload)["code"] == "wrong_secret"
    assert d.pending == []  # not one argon2id derivation spent on them
    d.join("ada", request_id="real")  # the real team is not held up
    assert [j.name for j in d.pending] == ["ada"] and not d.pending[0].verify
    d.finish_keys()
    assert list(d.game.players) == ["ada"]


def test_a_derived_key_is_remembered_so_a_rejoin_costs_nothing() -> None:
    d = ArenaDriver(reset_after=1)
    d.join("ada")
    d.defer_keys = True
    d.join("ada")  # a repeat: no derivation, no record, no error
    assert d.pending == [] and [type(r) for r in d.records] == [Join]
    d.run(d.arena.close_lobby("next game", d.now))
    d.join("ada")
    assert d.pending == [] and list(d.game.players) == ["ada"]


def test_a_failed_derivation_is_reported_with_every_waiting_request_id() -> None:
    d = ArenaDriver()
    d.defer_keys = True
    d.join("ada", "s", "a1")
    d.join("ada", "s", "a2")
    (job,) = d.pending
    assert isinstance(job, DeriveKey)
    out = d.finish_keys(wrong=lambda _job: Illegal(Code.BUSY, "busy: the join could not be checked; try again"))
    assert [json.loads(p.payload)["request_id"] for p in out] == ["a1", "a2"]


def test_left_out_squatters_free_the_lobby_at_the_deadline() -> None:
    d = ArenaDriver(max_players=3, placement_timeout=60)
    for name in ("s1", "s2", "s3"):
        d.join(name)
    assert json.loads(d.join("ada", request_id="r")[0].payload)["code"] == "lobby_full"
    d.now += 61
    out = d.run(d.arena.on_tick(d.now))
    assert {p.topic for p in out if p.topic.endswith("/error")} == {d.t.player_error(n) for n in ("s1", "s2", "s3")}
    assert isinstance(d.records[-1], Tick) and d.game.players == {}
    d.join("ada")
    assert list(d.game.players) == ["ada"]


def test_a_placement_that_changes_nothing_is_not_journaled_and_moves_are_capped() -> None:
    d = ArenaDriver()
    d.join("alice")
    d.records.clear()
    d.place("alice", {"carrier": ROWS["carrier"]})
    again = d.place("alice", {"carrier": ROWS["carrier"]})  # freshly sealed, same place
    assert [(p.topic, p.payload, p.retain) for p in again] == [(d.t.approved("alice", "carrier"), "true", True)]
    assert len(d.records) == 1  # approved again, as any valid placement is; nothing journaled
    spots = [Placement(0, y, Orientation.HORIZONTAL) for y in range(10)]
    for i in range(PLACEMENTS_CAP - 1):  # the first placement counts too
        d.place("alice", {"carrier": spots[(i + 1) % 10]})
    out = d.place("alice", {"carrier": spots[0]})
    report = d.errors(out)[d.t.ship_error("alice", "carrier")]
    assert report["code"] == "too_many" and len(d.records) == PLACEMENTS_CAP


# -- a seat decided again when the join is applied (a tournament's roster) --------------


def _seated_arena(roster: set[str]) -> ArenaDriver:
    d = ArenaDriver(max_players=2, min_players=2)

    def seat(name: str) -> None:
        if name not in roster:
            raise Illegal(Code.NOT_REGISTERED, f"{name!r} is not scheduled here now")

    d.arena.seat = seat
    d.defer_keys = True  # the key derivation held: the race the review won 4 of 8 times
    return d


def test_a_roster_emptied_while_the_key_is_derived_keeps_the_join_out() -> None:
    """A team joins at the moment of its own no-show: the roster said yes when
    the join was read, the director empties it (and closes the lobby) before
    the derivation ends. The join must not land, in this lobby or the next."""
    roster = {"mallory", "alice"}
    d = _seated_arena(roster)
    d.join("mallory", request_id="r1")
    assert [job.name for job in d.pending] == ["mallory"]
    roster.clear()  # the no-show: nobody is scheduled here any more
    out = d.finish_keys()
    assert d.game.players == {} and d.records == []  # nothing journaled, nobody seated
    assert d.errors(out)[d.t.errors]["code"] == "not_registered"


def test_a_join_never_lands_in_another_game_than_the_one_it_asked_for() -> None:
    """The lobby closes while the key is derived (a no-show, the organiser):
    the derivation ends in the next game's lobby, and is refused there,
    whoever the roster admits (here it still admits carol)."""
    d = _seated_arena({"alice", "carol"})
    d.join("alice")
    d.finish_keys()  # alice waits in the lobby
    game_no = d.game.game_no
    d.join("carol", request_id="c1")  # held
    d.run(d.arena.close_lobby("no-show", d.now))
    assert d.game.game_no == game_no + 1 and d.game.players == {}
    out = d.finish_keys()
    assert d.game.players == {}  # not in the new lobby either
    error = d.errors(out)[d.t.errors]
    assert error["code"] == "lobby_closed" and error["request_id"] == "c1"


# -- what a (re)connect publishes (protocol section 6, v2.1) ----------------------------

RECONNECT_DOC = re.search(
    r"\*\*\(v2\.1\) What you see when the referee \(re\)connects\.\*\*(.*?)\*\*Paced play",
    (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text(),
    flags=re.DOTALL,
)


def families(d: ArenaDriver, out: list[Publish]) -> list[str]:
    """Each publish's topic as the document spells its family."""
    named = []
    for p in out:
        route = d.t.parse_outbound(p.topic)
        assert route is not None, p.topic
        family = re.sub(f"/{route.name}(/|$)", r"/<name>\1", p.topic, count=1) if route.name else p.topic
        named.append(family.replace(f"/ships/{route.ship}/", "/ships/<ship>/") if route.ship else family)
    return named


def test_what_a_team_sees_at_a_referee_reconnect_is_every_retained_topic() -> None:
    """At every (re)connect the runner publishes Arena.presence() (after the
    sweep and any backlog): every retained topic the game holds, then pubkey,
    version and "up" last. In each phase that is the list section 6 gives."""
    assert RECONNECT_DOC, "section 6 lost its reconnect paragraph"
    doc = RECONNECT_DOC[1]
    d = ArenaDriver(seed=3, max_missed_turns=1, turn_timeout=30)
    d.join("alice")
    d.join("bob")
    seen: dict[str, set[str]] = {}
    seen["lobby"] = set(families(d, d.arena.presence()))
    d.join("carol")
    for name, fleet in FLEETS.items():
        d.place(name, fleet)
    me, target = d.game.current, others(d)[0]
    assert me is not None
    patrol = [(c % 10, c // 10) for c in FLEETS[target]["patrolboat"].cells(2)]
    for x, y in patrol:
        d.fire(me, target, x, y)
    taken = set(all_cells(FLEETS[target]))
    for x, y in [(x, y) for y in range(10) for x in range(10) if (x, y) not in taken][:3]:
        d.fire(me, target, x, y)
    assert d.game.turn == 2
    seen["turn"] = set(families(d, d.arena.presence()))
    while d.game.phase is Phase.TURN:  # each current player misses a turn: dropped
        d.now += 30
        d.run(d.arena.on_tick(d.now))
    seen["over"] = set(families(d, d.arena.presence()))
    common = {"/game/state", "/game/id", "/game/deadline", "/players/list", "/players/count", "/game/pubkey"}
    common |= {"/game/version", "/game/server", "/players/<name>/ships/<ship>/approved"}
    assert seen["lobby"] == common
    game = {"/game/turn", "/game/current", "/game/salvo", "/players/<name>/ships/<ship>/sunk"}
    assert seen["turn"] == common | game
    over = {"/game/winner", "/game/stats/summary", "/game/stats/players/<name>", "/game/record"}
    assert seen["over"] == common | game - {"/game/current"} | over | {"/players/<name>/defeated"}
    for family in set().union(*seen.values()):
        assert f"`{family}`" in doc or f"`{family.rsplit('/', 1)[-1]}`" in doc, family
    out = d.arena.presence()
    assert all(p.retain for p in out) and out[-1] == Publish(d.t.server, "up", True)
    assert Publish(d.t.version, "2.1", True) in out
