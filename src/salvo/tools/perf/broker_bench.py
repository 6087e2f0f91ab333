"""Shots through mosquitto and a referee process (as deployed), each beside
what the same broker does for a bare paho echo: one shot's round trip, and
pipelined salvos per second."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from salvo.net.mqtt import Broker
from salvo.spec import crypto, payloads
from salvo.spec.rules import BOARD_SIZE, SHIP_IDS, Orientation, Placement
from salvo.spec.topics import Outbound, Topics, any_arena, arena_of
from salvo.tools.localbroker import echo_peer
from salvo.tools.perf.probe import Probe, read_retained
from salvo.tools.stress import RefereeProcess

#: What the echo carries: the size of a fire message.
ECHO_PAYLOAD = b'{"data":{"x":3,"y":9,"turn":1},"signature":"' + b"A" * 88 + b'"}'


@contextmanager
def echo(broker: Broker, label: str) -> Iterator[tuple[Probe, str, str]]:
    """A probe and a running echo peer: (probe, inbound, outbound), once the
    peer answers."""
    tag = os.urandom(4).hex()
    inbound, outbound = f"/bench-echo/{tag}/in", f"/bench-echo/{tag}/out"
    probe = Probe(broker, [outbound], label)
    try:
        with echo_peer(broker, inbound, outbound):
            for _ in range(50):  # until the peer is subscribed
                probe.publish(inbound, b"ping")
                try:
                    probe.expect(lambda t, _p: t == outbound, timeout=0.2)
                    break
                except (queue.Empty, TimeoutError):
                    continue
            else:
                raise TimeoutError("the echo peer never answered")
            yield probe, inbound, outbound
    finally:
        probe.close()


def echo_throughput(broker: Broker, n: int) -> float:
    got = [0]
    done = threading.Event()
    with echo(broker, "echo-tput") as (probe, inbound, _outbound):

        def count(_t: str, _p: bytes, _at: float) -> None:
            got[0] += 1
            if got[0] >= n:
                done.set()

        probe.on_message = count
        t0 = time.perf_counter()
        for _ in range(n):
            probe.publish(inbound, ECHO_PAYLOAD)
        done.wait(120)
        return got[0] / (time.perf_counter() - t0)


# -- games through the real referee -----------------------------------------------

FLEET_A = {s: Placement(0, i, Orientation.HORIZONTAL) for i, s in enumerate(SHIP_IDS)}  # rows 0-4
WATER = [(x, y) for y in range(5, BOARD_SIZE) for x in range(BOARD_SIZE)]  # never a ship of FLEET_A


@dataclass
class Table:
    """One arena with two bench teams in it, in its turn phase. Both teams
    place FLEET_A and only ever shoot water, so the game never ends."""

    prefix: str
    names: tuple[str, str]
    keys: dict[str, bytes]
    t: Topics
    #: the payload of the first /game/turn
    first: bytes
    #: /game/id, which every shot signs
    game: str


def team_keys(names: list[str]) -> dict[str, bytes]:
    return {n: crypto.derive_team_key(n, f"{n}-bench-secret") for n in names}


def open_table(probe: Probe, prefix: str, keys: dict[str, bytes], broker: Broker) -> Table:
    """Join both teams, place, and wait for the first turn (messages for
    this arena must reach ``probe``)."""
    t = Topics(prefix)
    game = read_retained(broker, t.game_id).decode()
    names = tuple(keys)
    assert len(names) == 2
    for name in names:
        probe.publish(t.request_participation, payloads.join_request(name, f"{name}-bench-secret"))
    probe.expect(lambda tp, p: tp == t.players_count and p == b"2", timeout=60)
    for name in names:
        for ship, pl in FLEET_A.items():
            probe.publish(t.place(name, ship), crypto.seal(keys[name], payloads.placement(pl)))
    _tp, first, _at = probe.expect(lambda tp, p: tp == t.turn and bool(p), timeout=60)
    return Table(prefix, (names[0], names[1]), keys, t, first, game)


def fire_payload(key: bytes, target: str, turn: int, game: str, shot: int) -> str:
    x, y = WATER[shot % len(WATER)]
    return json.dumps(crypto.sign(key, payloads.fire_data(x, y, target, turn, game)))


#: The referee's --log-level in the bench: only what goes wrong is written
#: (--referee-log-level info measures it as it runs by default).
REFEREE_LOG_LEVEL = "warning"


def rtt_pairs(broker: Broker, n: int, log_level: str = REFEREE_LOG_LEVEL) -> tuple[list[float], list[float]]:
    """``n`` shot round trips and ``n`` echo round trips through a referee
    process of its own (see :func:`shot_rtt`). Returns (echo, shot) in ms."""
    prefix = f"rtt{os.urandom(3).hex()}"
    flags = ("--turn-timeout", "600", "--placement-timeout", "600", "--log-level", log_level)
    with RefereeProcess(broker, [prefix], *flags):
        return shot_rtt(broker, prefix, n)


def shot_rtt(broker: Broker, prefix: str, n: int) -> tuple[list[float], list[float]]:
    """``n`` shot round trips (a fire published -> the target's /hit) in
    arena ``prefix`` (a referee runs it) and ``n`` echo round trips,
    alternating, so both see the same machine at the same time: measured one
    batch after the other, the echo's p50 moved by up to 30% between runs on
    a shared machine, and the ratio with it. Each round trip starts when the
    previous one (of the other kind) has come back. Returns (echo, shot)
    round trips in ms."""
    keys = team_keys([f"{prefix}-a", f"{prefix}-b"])
    t = Topics(prefix)
    with echo(broker, "echo-rtt") as (peer, inbound, outbound):
        probe = Probe(broker, [t.turn, t.players_count, t.hit("+")], "rtt")
        try:
            table = open_table(probe, prefix, keys, broker)
            echoes: list[float] = []
            shots: list[float] = []
            info = json.loads(table.first)
            left = info["shots"]
            shot = 0
            while len(shots) < n:
                t0 = time.perf_counter()
                peer.publish(inbound, ECHO_PAYLOAD)
                # A late answer to a warm-up ping must not count as this one's.
                _t, _p, at = peer.expect(lambda tp, p: tp == outbound and p == ECHO_PAYLOAD)
                echoes.append((at - t0) * 1000)
                me = info["player"]
                other = next(x for x in table.names if x != me)
                body = fire_payload(keys[me], other, info["turn"], table.game, shot)
                shot += 1
                t0 = time.perf_counter()
                probe.publish(t.fire(other), body)
                _t, _p, at = probe.expect_topic(t.hit(other))
                shots.append((at - t0) * 1000)
                left -= 1
                if left == 0:
                    info = json.loads(probe.expect_topic(t.turn)[1])
                    left = info["shots"]
            return echoes, shots
        finally:
            probe.close()


def shot_throughput(broker: Broker, arenas: int, seconds: float, log_level: str = REFEREE_LOG_LEVEL) -> float:
    """Pipelined salvos in ``arenas`` arenas at once: every salvo goes out
    back to back as soon as its turn is announced. Shots/s, counted by the
    /hit messages that came back."""
    prefixes = [f"tp{os.urandom(2).hex()}{i}" for i in range(arenas)]
    flags = ("--turn-timeout", "600", "--placement-timeout", "600", "--log-level", log_level)
    with RefereeProcess(broker, prefixes, *flags):
        return pipelined_salvos(broker, prefixes, seconds)


def pipelined_salvos(broker: Broker, prefixes: list[str], seconds: float) -> float:
    """Shots/s in arenas ``prefixes`` (referees run them), every salvo sent
    back to back as soon as its turn is announced."""
    keys = {p: team_keys([f"{p}-a", f"{p}-b"]) for p in prefixes}
    # Three wildcards, not three filters an arena: NATS makes every QoS 1
    # subscription a JetStream consumer, and each takes a while to make.
    bare = Topics()
    probe = Probe(broker, [any_arena(f) for f in (bare.turn, bare.players_count, bare.hit("+"))], "tput")
    ours = set(prefixes)
    try:
        tables = {p: open_table(probe, p, keys[p], broker) for p in prefixes}
        hits = [0]
        counting = [False]
        shots = dict.fromkeys(prefixes, 0)
        turns: queue.Queue[tuple[str, bytes] | None] = queue.Queue()

        def on_message(topic: str, payload: bytes, _at: float) -> None:
            # Network thread: count, hand turns to the firing thread (as a
            # team's client would; publishing from inside paho's callback
            # defers the writes to its next loop pass).
            prefix, route = arena_of(topic)
            if prefix not in ours or route is None:
                return
            if route.kind is Outbound.HIT:
                if counting[0]:
                    hits[0] += 1
            elif route.kind is Outbound.TURN and payload:
                turns.put((prefix, payload))

        def fire() -> None:
            while (job := turns.get()) is not None:
                prefix, payload = job
                table, info = tables[prefix], json.loads(payload)
                me = info["player"]
                other = next(x for x in table.names if x != me)
                for _ in range(info["shots"]):
                    body = fire_payload(table.keys[me], other, info["turn"], table.game, shots[prefix])
                    probe.publish(table.t.fire(other), body)
                    shots[prefix] += 1

        probe.on_message = on_message
        firer = threading.Thread(target=fire, name="bench-fire", daemon=True)
        firer.start()
        for table in tables.values():  # their first turns were announced already
            turns.put((table.prefix, table.first))
        time.sleep(min(1.0, seconds / 4))  # warm up
        counting[0] = True
        t0 = time.perf_counter()
        time.sleep(seconds)
        counting[0] = False
        rate = hits[0] / (time.perf_counter() - t0)
        turns.put(None)
        firer.join(5)
        return rate
    finally:
        probe.close()
