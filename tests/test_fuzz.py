"""Fuzzing the referee's sans-IO core (protocol + wire + crypto + engine) with
hypothesis: every inbound topic, arbitrary and near-valid payloads.

For every message: no exception escapes; it is either accepted (journaled),
a redelivery of an accepted shot (ignored in silence), or rejected with
exactly one error report carrying a documented code, and a rejected message
leaves the game exactly as it was but for the nonce an authentic signature
spends. After each batch the game in progress must still finish correctly.

CI runs a sample; the dedicated run (docs/reliability.md) is
    SALVO_FUZZ_MESSAGES=100000 .venv/bin/pytest tests/test_fuzz.py -q -s
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey

from salvo.arena.arena import ROUTINE, Arena, DeriveKey, Log, Record
from salvo.game.engine import Game
from salvo.game.events import Burn, Config, Join, Phase, Place
from salvo.spec import crypto
from salvo.spec.errors import Code
from salvo.spec.payloads import Publish
from salvo.spec.payloads import placement as encode_placement
from salvo.spec.rules import SHIP_IDS
from salvo.spec.topics import Topics

from kit import COLUMNS, ROWS, phase_of, spent, without_spent

MESSAGES = int(os.environ.get("SALVO_FUZZ_MESSAGES", "2000"))
BATCH = 12  # messages per example at most; ~6.5 on average
T = Topics("fz")
KEYS = {"alice": bytes(range(32)), "bob": bytes(range(1, 33)), "eve": bytes(32)}
REFEREE = PrivateKey.generate()
PUBKEY = crypto.public_key_b64(REFEREE)
NOW = 1_000_000.0
counted = {"fuzzed": 0, "accepted": 0, "rejected": 0, "examples": 0}

# -- what to throw at it -----------------------------------------------------------------

names = st.sampled_from(["alice", "bob", "carol", "eve", "", "a b", "x" * 40, "é", "players", "$SYS", "a\x00b"])
ships = st.sampled_from([*SHIP_IDS, "canoe", "", "car rier", "CARRIER"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=15,
)
coords = st.integers(-3, 12) | st.sampled_from([2**63, -(2**63), 10**30])
GAME_ID = Game(Config(), T, seed=1).game_id
shot_data = st.fixed_dictionaries(
    {"x": coords, "y": coords},
    optional={
        "target": names,
        "turn": st.integers(-1, 60) | st.none(),
        "game": st.sampled_from([GAME_ID, GAME_ID.upper(), "0" * 16, ""]) | st.none(),
    },
)


@st.composite
def signed_fire(draw: st.DrawFn) -> bytes:
    """A fire message near a valid one: maybe the wrong signer, maybe data
    that differs from what was signed, maybe a damaged signature."""
    signer = draw(st.sampled_from(list(KEYS)))
    data = draw(shot_data | json_values)
    signed = data if draw(st.booleans()) else draw(shot_data | json_values)
    sig = crypto.seal(KEYS[signer], json.dumps(signed))
    how = draw(st.sampled_from(["as is", "flip", "cut", "urlsafe", "no padding", "alias", "both", "no sig", "not str"]))
    raw = bytearray(base64.b64decode(sig))
    if how == "flip":
        raw[draw(st.integers(0, len(raw) - 1))] ^= 1 << draw(st.integers(0, 7))
        sig = base64.b64encode(raw).decode()
    elif how == "cut":
        sig = base64.b64encode(raw[: draw(st.integers(0, 45))]).decode()
    elif how == "urlsafe":
        sig = base64.urlsafe_b64encode(raw).decode()
    elif how == "no padding":
        sig = sig.rstrip("=")
    msg: dict[str, Any] = {"data": data, "signature": sig}
    if how == "alias":
        msg = {"payload": data, "signature": sig}
    elif how == "both":
        msg["payload"] = draw(json_values)
    elif how == "no sig":
        del msg["signature"]
    elif how == "not str":
        msg["signature"] = draw(json_values)
    return json.dumps(msg).encode()


@st.composite
def sealed_placement(draw: st.DrawFn) -> bytes:
    key = KEYS[draw(st.sampled_from(list(KEYS)))]
    body = draw(
        st.fixed_dictionaries(
            {
                "coordinates": st.from_regex(r"-?\d{1,3};-?\d{1,3}", fullmatch=True) | json_values,
                "orientation": st.sampled_from(["HORIZONTAL", "vertical", "Diagonal", ""]) | json_values,
            },
        ).map(json.dumps)
        | st.text(max_size=30)
    )
    return crypto.seal(key, body).encode()


@st.composite
def join_request(draw: st.DrawFn) -> bytes:
    body = json.dumps({"name": draw(names | json_values), "secret": draw(st.text(max_size=20) | json_values)})
    return crypto.seal_to(PUBKEY, body).encode() if draw(st.booleans()) else body.encode()


payloads = st.one_of(
    st.binary(max_size=200),
    st.binary(min_size=4090, max_size=4110),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 5000).map(lambda n: b"[" * n),
    st.integers(30, 200).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.text(max_size=100).map(lambda s: s.encode("utf-8", "surrogatepass")),
    signed_fire(),
    sealed_placement(),
    join_request(),
)
topics = st.one_of(
    st.just(T.request_participation),
    st.builds(T.place, names, ships),
    st.builds(T.fire, names),
    st.text(max_size=30).map(lambda s: f"/fz/game/{s}"),
    st.text(max_size=30).map(lambda s: f"/fz/players/{s}"),
)


def valid_move(data: st.DataObject, arena: Arena, sent: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """A message that fits the game right now (or a replay of one that did),
    so accepted moves and garbage interleave."""
    game = arena.game
    if sent and data.draw(st.integers(0, 4)) == 0:
        return data.draw(st.sampled_from(sent))  # a redelivery: must change nothing
    x, y = data.draw(st.integers(0, 9)), data.draw(st.integers(0, 9))
    if game.phase is Phase.LOBBY:
        ship = data.draw(st.sampled_from(SHIP_IDS))
        orientation = data.draw(st.sampled_from(["HORIZONTAL", "VERTICAL"]))
        body = json.dumps({"coordinates": f"{x};{y}", "orientation": orientation})
        return T.place("bob", ship), crypto.seal(KEYS["bob"], body).encode()
    shooter = game.current or "alice"
    target = data.draw(st.sampled_from(["alice", "bob"]))
    msg = crypto.sign(KEYS[shooter], bound(target, x, y, game))
    return T.fire(target), json.dumps(msg).encode()


def bound(target: str, x: int, y: int, game: Game) -> dict[str, Any]:
    return {"x": x, "y": y, "target": target, "turn": game.turn, "game": game.game_id}


# -- the game under fire ---------------------------------------------------------------------


def new_arena(phase: str) -> Arena:
    game = Game(Config(), T, seed=1)
    for name in ("alice", "bob"):
        game.handle(Join(name, KEYS[name], NOW))
    for ship, p in ROWS.items():
        game.handle(Place("alice", ship, p, NOW))
    for ship, p in list(COLUMNS.items())[: 5 if phase == "turn" else 3]:
        game.handle(Place("bob", ship, p, NOW))
    return Arena(game, REFEREE)


CODES = {c.value for c in Code}


def is_accepted(effects: list[Any]) -> bool:
    return any(isinstance(e, Record) and not isinstance(e.event, Burn) for e in effects)


def send(arena: Arena, topic: str, payload: bytes) -> list[Any]:
    game = arena.game
    before, before_spent = game.snapshot(), spent(game)
    effects = arena.on_message(topic, payload, NOW)
    if is_accepted(effects):
        return effects
    assert without_spent(game.snapshot()) == without_spent(before), f"rejected {topic!r} changed the game"
    burns = [e for e in effects if isinstance(e, Record)]
    assert len(burns) <= 1 and (burns or spent(game) == before_spent)
    reports = [e for e in effects if isinstance(e, Publish)]
    # a redelivery or a repeat changes nothing and is no error; a join waits for its derivation
    routine = any(isinstance(e, Log) and e.code == ROUTINE for e in effects)
    if routine:  # silent, or (a ship placed where it is) its approval again
        assert all(p.topic.endswith("/approved") and p.payload == "true" for p in reports), effects
    elif not any(isinstance(e, DeriveKey) for e in effects):
        assert len(reports) == 1, effects
        report = json.loads(reports[0].payload)
        assert report["error"] and report["code"] in CODES
        assert not reports[0].retain
    return effects


def finish(arena: Arena) -> None:
    """Valid moves until the game is over: the fuzzing broke nothing."""
    game = arena.game
    for _ in range(2):  # place bob's fleet (a fuzzed move may block a ship on the first pass)
        for ship, p in COLUMNS.items():
            if game.phase is Phase.LOBBY:
                send(arena, T.place("bob", ship), crypto.seal(KEYS["bob"], encode_placement(p)).encode())
    assert phase_of(game) is Phase.TURN
    swept = {"alice": 0, "bob": 0}
    for _ in range(400):
        if phase_of(game) is Phase.OVER:
            break
        shooter = game.current
        assert shooter is not None
        target = "bob" if shooter == "alice" else "alice"
        turn = game.turn
        for _shot in range(game.allowed - game.fired):  # fuzzing may have fired some
            c = swept[shooter] % 100
            swept[shooter] += 1
            msg = crypto.sign(KEYS[shooter], bound(target, c % 10, c // 10, game))
            effects = send(arena, T.fire(target), json.dumps(msg).encode())
            assert is_accepted(effects), "a valid shot was refused after fuzzing"
        assert game.turn > turn or phase_of(game) is Phase.OVER
    assert phase_of(game) is Phase.OVER and game.winner in ("alice", "bob")


@settings(
    max_examples=max(1, MESSAGES * 2 // BATCH),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(phase=st.sampled_from(["lobby", "turn"]), data=st.data())
def fuzz_a_game(phase: str, data: st.DataObject) -> None:
    """One example: a batch of messages at a game in ``phase``, then the game
    finished with valid moves."""
    arena = new_arena(phase)
    accepted: list[tuple[str, bytes]] = []
    for _ in range(data.draw(st.integers(1, BATCH))):
        if data.draw(st.integers(0, 4)) == 0 and arena.game.phase is not Phase.OVER:
            topic, payload = valid_move(data, arena, accepted)
        else:
            topic, payload = data.draw(st.tuples(topics, payloads))
        effects = send(arena, topic, payload)
        counted["fuzzed"] += 1
        if is_accepted(effects):
            counted["accepted"] += 1
            accepted.append((topic, payload))
        else:
            counted["rejected"] += 1
    counted["examples"] += 1
    if arena.game.phase is Phase.OVER:
        return
    finish(arena)


def test_fuzzed_messages_never_crash_or_corrupt() -> None:
    counted.update(dict.fromkeys(counted, 0))  # this run's own count, whatever ran before
    fuzz_a_game()  # every example; the first failure (shrunk) raises here
    c = counted
    print(
        f"\nfuzz: {c['fuzzed']} fuzzed messages in {c['examples']} games: {c['rejected']} rejected "
        f"(state unchanged), {c['accepted']} accepted; every game then finished correctly"
    )
    # as much was thrown as asked for (hypothesis may stop a search early)
    assert c["fuzzed"] >= MESSAGES // 2, c
    assert c["rejected"] and c["accepted"], c


def test_an_accepted_shot_logs_its_topic_and_what_happened() -> None:
    arena = new_arena("turn")
    shooter = arena.game.current
    assert shooter is not None
    target = "bob" if shooter == "alice" else "alice"
    msg = crypto.sign(KEYS[shooter], bound(target, 9, 9, arena.game))
    effects = arena.on_message(T.fire(target), json.dumps(msg).encode(), NOW)
    [accepted] = [e for e in effects if isinstance(e, Log)]
    assert accepted.accepted
    assert accepted.line == f"accept fire /fz/players/{target}/fire: {shooter} fired at {target} (9,9) 1/5"
