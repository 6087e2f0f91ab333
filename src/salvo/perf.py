"""``salvo bench``: the product measured the way its users feel it, side by
side with the limits of the machine, in one run.

* engine: whole in-memory games through the referee's own engine;
* e2e: a shot's round trip through mosquitto and the referee (a separate
  process, as deployed) beside a bare paho echo through the same broker;
  pipelined salvo throughput beside echo throughput;
* join: a burst of participation requests (argon2id each) against the
  ideal ``n x one derivation / cores``, and the latency of an unrelated
  message meanwhile;
* memory: the referee's resident set idle, with 10 arenas, and its peak
  during the burst.

Run as ``python -m salvo.perf echo URL IN OUT`` it is the echo peer.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import queue
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import paho.mqtt.client as paho

from salvo import crypto
from salvo.engine import Config, Event, Fire, Game, Join, Place, Result
from salvo.mqtt import Broker, new_client
from salvo.rules import BOARD_SIZE, SHIP_IDS, Orientation, Placement, random_fleet
from salvo.stress import RefereeProcess, rss_mb
from salvo.topics import Topics

#: figure -> (limit, comparison): the targets of issue #7, checked in the table.
TARGETS: dict[str, tuple[float, str]] = {
    "engine.ms_per_game": (0.5, "<="),
    "engine.knockout_1024_s": (1.0, "<="),
    "e2e.rtt_ratio_p50": (1.5, "<="),
    "e2e.throughput_ratio": (0.5, ">="),
    "join.burst_ratio": (1.2, "<="),
    "join.other_p99_ms": (50.0, "<="),
}


@dataclass
class Results:
    figures: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def put(self, key: str, value: float, digits: int = 4) -> None:
        self.figures[key] = round(float(value), digits)

    def verdicts(self) -> dict[str, bool]:
        out = {}
        for key, (limit, op) in TARGETS.items():
            if key in self.figures:
                v = self.figures[key]
                out[key] = v <= limit if op == "<=" else v >= limit
        return out

    def as_json(self) -> dict[str, Any]:
        return {**self.figures, "targets_met": self.verdicts(), "meta": self.meta}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


# -- the engine alone ------------------------------------------------------------

_ENGINE_CONFIG = Config()
_ENGINE_TOPICS = Topics()
_KEY = bytes(32)
#: tuple.__new__(Fire, ...): the engine's own way to make its tuples; Fire(...) costs twice as much.
_new: Final = tuple.__new__
_XY = [(c % BOARD_SIZE, c // BOARD_SIZE) for c in range(BOARD_SIZE * BOARD_SIZE)]


class EventClock:
    """Wall time inside :meth:`Game.handle`, by kind of event: where a game's
    time goes (each reading includes ~0.1 us of the clock itself)."""

    KINDS = ("lobby", "shot", "salvo_end")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.KINDS, 0.0)
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.last: Game | None = None  # the game timed last

    def wrap(self, game: Game) -> Callable[[Event], Result]:
        self.last = game
        handle, clock = game.handle, time.perf_counter

        def timed(event: Event) -> Result:
            t0 = clock()
            result = handle(event)
            dt = clock() - t0
            if not isinstance(event, Fire):
                kind = "lobby"
            else:  # a shot that ends its salvo leaves a new turn (no shots yet) or the game over
                kind = "salvo_end" if game.fired == 0 or game.current is None else "shot"
            self.seconds[kind] += dt
            self.counts[kind] += 1
            return result

        return timed


def engine_game(rng: random.Random, names: list[str], clock: EventClock | None = None) -> str | None:
    """One whole game of random shooters through the engine; the winner.

    Each shooter fires at each opponent in its own random order of the cells
    (then at random cells, should a salvo outlast the board)."""
    game = Game(_ENGINE_CONFIG, _ENGINE_TOPICS, rng.randrange(2**32))
    handle = clock.wrap(game) if clock else game.handle
    for name in names:
        handle(Join(name, _KEY, 0.0))
    for name in names:
        for ship, placement in random_fleet(rng).items():
            handle(Place(name, ship, placement, 0.0))
    # A shuffle by random sort keys: half the cost of rng.sample for this.
    rand = rng.random
    aims = {(a, b): sorted(_XY, key=lambda _xy: rand()) for a in names for b in names if a != b}
    players, duel = game.players, len(names) == 2
    # Two players: the opponent is always in (a defeat ends the game).
    opponents = {a: [b for b in names if b != a] for a in names}
    while (me := game.current) is not None:  # a current player exactly while a turn is on
        alive = opponents[me] if duel else [n for n in game.order if n != me and not players[n].defeated]
        many = len(alive) > 1  # else every shot of the salvo at the one opponent
        target = alive[0]
        todo = aims[me, target]
        turn, game_id = game.turn, game.game_id
        for _ in range(game.allowed):
            if many:
                target = alive[rng.randrange(len(alive))]
                todo = aims[me, target]
            x, y = todo.pop() if todo else _XY[rng.randrange(len(_XY))]
            handle(_new(Fire, (me, target, x, y, turn, game_id, None, 0.0)))
    return game.winner


def bench_engine(res: Results, games: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for players, key in ((2, "engine.ms_per_game"), (4, "engine.ms_per_game_4p")):
        names = [f"p{i}" for i in range(players)]
        n = games if players == 2 else max(1, games // 4)
        t0 = time.perf_counter()
        for _ in range(n):
            engine_game(rng, names)
        dt = time.perf_counter() - t0
        res.put(key, dt / n * 1000)
        res.put(key.replace("ms_per_game", "games_per_s"), n / dt, 1)
    # Where a two-player game's time goes, from a separate timed run (the
    # clock costs time itself, so the games above run without it).
    clock, n = EventClock(), max(1, games // 2)
    for _ in range(n):
        engine_game(rng, ["p0", "p1"], clock)
    s, c = clock.seconds, clock.counts
    res.put("engine.shot_us", s["shot"] / max(1, c["shot"]) * 1e6, 2)
    res.put("engine.salvo_end_us", s["salvo_end"] / max(1, c["salvo_end"]) * 1e6, 2)
    res.put("engine.lobby_ms_per_game", s["lobby"] / n * 1000)
    inside = sum(s.values()) / n * 1000
    res.put("engine.outside_ms_per_game", max(0.0, res.figures["engine.ms_per_game"] - inside))
    res.meta["engine_events_per_game"] = {k: round(v / n, 1) for k, v in c.items()}


def _knockout_game(job: tuple[str, str, str]) -> str:
    """One knockout game; its own seed, so the result does not depend on
    which process plays it."""
    seed, a, b = job
    return engine_game(random.Random(seed), [a, b]) or a


def knockout(teams: int, seed: int = 1, workers: int = 1) -> tuple[str, int]:
    """A single-elimination knockout of ``teams`` (a power of two); the
    champion and the number of games played. A round's games are
    independent: with ``workers`` > 1 they are shared out to processes."""
    field_ = [f"team{i}" for i in range(teams)]
    played, round_no = 0, 0
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        while len(field_) > 1:
            round_no += 1
            jobs = [(f"{seed}/{round_no}/{a}", a, b) for a, b in zip(field_[::2], field_[1::2], strict=True)]
            if pool is not None and len(jobs) >= 2 * workers:
                field_ = pool.map(_knockout_game, jobs, chunksize=max(1, len(jobs) // (4 * workers)))
            else:
                field_ = [_knockout_game(j) for j in jobs]
            played += len(jobs)
    finally:
        if pool is not None:
            pool.terminate()
    return field_[0], played


def bench_knockout(res: Results, teams: int) -> None:
    """On one core, and on all of them (an organiser simulating a night
    would use them all; the games of a round are independent)."""
    t0 = time.perf_counter()
    champion, played = knockout(teams)
    res.put(f"engine.knockout_{teams}_1core_s", time.perf_counter() - t0)
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    same, _ = knockout(teams, workers=cores)
    res.put(f"engine.knockout_{teams}_s", time.perf_counter() - t0)
    assert same == champion, "the knockout must not depend on how it is shared out"
    res.meta[f"knockout_{teams}_games"] = played


# -- a broker ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mosquitto_binary() -> str:
    """Where mosquitto is (Debian puts it in /usr/sbin, often not on PATH)."""
    path = shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.path.exists(p)), None
    )
    if path is None:
        raise RuntimeError("mosquitto is not installed: apt-get install -y mosquitto (bash .ci/run does it)")
    return path


@contextmanager
def private_mosquitto() -> Iterator[Broker]:
    """A throw-away open mosquitto on a free loopback port."""
    binary = mosquitto_binary()
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="salvo-bench-broker-"))
    conf = workdir / "mosquitto.conf"
    lines = [
        f"listener {port} 127.0.0.1",
        "allow_anonymous true",
        "persistence false",
        "max_queued_messages 100000",
        "max_inflight_messages 0",
        "set_tcp_nodelay true",
        f"log_dest file {workdir}/mosquitto.log",
    ]
    if os.geteuid() == 0:
        lines.append("user root")
    conf.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > end or proc.poll() is not None:
                    raise RuntimeError(f"mosquitto did not start: {(workdir / 'mosquitto.log').read_text()}") from None
                time.sleep(0.05)
        yield Broker(host="127.0.0.1", port=port)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def mosquitto_version() -> str:
    try:
        out = subprocess.run([mosquitto_binary(), "-h"], check=False, capture_output=True, text=True, timeout=5).stdout
    except (OSError, RuntimeError):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"


# -- a lean MQTT client for measuring --------------------------------------------


class Probe:
    """One paho connection; every message lands in a queue with its arrival
    time, or goes to ``on_message`` on the network thread."""

    def __init__(self, broker: Broker, filters: list[str], label: str) -> None:
        self.inbox: queue.Queue[tuple[str, bytes, float]] = queue.Queue()
        self.on_message: Callable[[str, bytes, float], None] | None = None
        self._subscribed = threading.Event()
        self.client = new_client(broker, f"bench-{label}-{os.urandom(3).hex()}")
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.on_message = self._message
        self.client.on_subscribe = lambda *_a: self._subscribed.set()
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        if filters:
            self.client.subscribe([(f, 1) for f in filters])
            if not self._subscribed.wait(10):
                raise TimeoutError("subscription not acknowledged")

    def _message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        now = time.perf_counter()
        if self.on_message is not None:
            self.on_message(msg.topic, bytes(msg.payload), now)
        else:
            self.inbox.put((msg.topic, bytes(msg.payload), now))

    def publish(self, topic: str, payload: str | bytes, qos: int = 1) -> None:
        self.client.publish(topic, payload, qos=qos)

    def expect(self, pred: Callable[[str, bytes], bool], timeout: float = 30.0) -> tuple[str, bytes, float]:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("the expected message did not come")
            topic, payload, at = self.inbox.get(timeout=left)
            if pred(topic, payload):
                return topic, payload, at

    def expect_topic(self, topic: str, timeout: float = 30.0) -> tuple[str, bytes, float]:
        return self.expect(lambda tp, _p: tp == topic, timeout)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def echo_main(url: str, inbound: str, outbound: str) -> None:
    """The echo peer: every message on ``inbound`` back on ``outbound``
    (QoS 1 both ways, like the referee), until killed."""
    broker = Broker.from_url(url)
    client = new_client(broker, f"bench-echo-{os.getpid()}")
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)

    def on_connect(c: paho.Client, *_a: Any) -> None:
        c.subscribe(inbound, qos=1)

    client.on_connect = on_connect

    def on_message(c: paho.Client, _u: Any, m: paho.MQTTMessage) -> None:
        c.publish(outbound, m.payload, qos=1)

    client.on_message = on_message
    client.connect(broker.host, broker.port)
    client.loop_forever()


@contextmanager
def echo_peer(broker: Broker, inbound: str, outbound: str) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "salvo.perf", "echo", _url(broker), inbound, outbound],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def _url(broker: Broker) -> str:
    auth = f"{broker.username}:{broker.password}@" if broker.username else ""
    return f"mqtt://{auth}{broker.host}:{broker.port}" + ("" if broker.mqtt5 else "?protocol=3")


#: What the echo carries: the size of a fire message.
_ECHO_PAYLOAD = b'{"data":{"x":3,"y":9,"turn":1},"signature":"' + b"A" * 88 + b'"}'


@contextmanager
def _echo(broker: Broker, label: str) -> Iterator[tuple[Probe, str, str]]:
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
    with _echo(broker, "echo-tput") as (probe, inbound, _outbound):

        def count(_t: str, _p: bytes, _at: float) -> None:
            got[0] += 1
            if got[0] >= n:
                done.set()

        probe.on_message = count
        t0 = time.perf_counter()
        for _ in range(n):
            probe.publish(inbound, _ECHO_PAYLOAD)
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


def _keys(names: list[str]) -> dict[str, bytes]:
    return {n: crypto.derive_team_key(n, f"{n}-bench-secret") for n in names}


def read_retained(broker: Broker, topic: str, timeout: float = 30.0) -> bytes:
    """The retained payload of ``topic`` (waits for a non-empty one)."""
    probe = Probe(broker, [topic], "retained")
    try:
        return probe.expect(lambda tp, p: tp == topic and bool(p), timeout)[1]
    finally:
        probe.close()


def open_table(probe: Probe, prefix: str, keys: dict[str, bytes], broker: Broker) -> Table:
    """Join both teams, place, and wait for the first turn (messages for
    this arena must reach ``probe``)."""
    t = Topics(prefix)
    game = read_retained(broker, t.game_id).decode()
    names = tuple(keys)
    assert len(names) == 2
    for name in names:
        probe.publish(t.request_participation, json.dumps({"name": name, "secret": f"{name}-bench-secret"}))
    probe.expect(lambda tp, p: tp == t.players_count and p == b"2", timeout=60)
    for name in names:
        for ship, pl in FLEET_A.items():
            body = json.dumps({"coordinates": f"{pl.x};{pl.y}", "orientation": pl.orientation.value})
            probe.publish(t.place(name, ship), crypto.seal(keys[name], body))
    _tp, first, _at = probe.expect(lambda tp, p: tp == t.turn and bool(p), timeout=60)
    return Table(prefix, (names[0], names[1]), keys, t, first, game)


def _fire_payload(key: bytes, target: str, turn: int, game: str, shot: int) -> str:
    x, y = WATER[shot % len(WATER)]
    return json.dumps(crypto.sign(key, {"x": x, "y": y, "target": target, "turn": turn, "game": game}))


def rtt_pairs(broker: Broker, n: int) -> tuple[list[float], list[float]]:
    """``n`` shot round trips (a fire published -> the target's /hit) and
    ``n`` echo round trips, alternating, so both see the same machine at
    the same time: measured one batch after the other, the echo's p50 moved
    by up to 30% between runs on a shared machine, and the ratio with it.
    Each round trip starts when the previous one (of the other kind) has
    come back. Returns (echo, shot) round trips in ms."""
    prefix = f"rtt{os.urandom(3).hex()}"
    keys = _keys(["rtt-a", "rtt-b"])
    with (
        RefereeProcess(broker, [prefix], "--turn-timeout", "600", "--placement-timeout", "600"),
        _echo(broker, "echo-rtt") as (echo, inbound, outbound),
    ):
        t = Topics(prefix)
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
                echo.publish(inbound, _ECHO_PAYLOAD)
                # A late answer to a warm-up ping must not count as this one's.
                _t, _p, at = echo.expect(lambda tp, p: tp == outbound and p == _ECHO_PAYLOAD)
                echoes.append((at - t0) * 1000)
                me = info["player"]
                other = next(x for x in table.names if x != me)
                body = _fire_payload(keys[me], other, info["turn"], table.game, shot)
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


def shot_throughput(broker: Broker, arenas: int, seconds: float) -> float:
    """Pipelined salvos in ``arenas`` arenas at once: every salvo goes out
    back to back as soon as its turn is announced. Shots/s, counted by the
    /hit messages that came back."""
    prefixes = [f"tp{os.urandom(2).hex()}{i}" for i in range(arenas)]
    keys = {p: _keys([f"{p}-a", f"{p}-b"]) for p in prefixes}
    with RefereeProcess(broker, prefixes, "--turn-timeout", "600", "--placement-timeout", "600"):
        filters = []
        for p in prefixes:
            t = Topics(p)
            filters += [t.turn, t.players_count, t.hit("+")]
        probe = Probe(broker, filters, "tput")
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
                if topic.endswith("/hit"):
                    if counting[0]:
                        hits[0] += 1
                elif topic.endswith("/game/turn") and payload:
                    turns.put((topic.split("/")[1], payload))

            def fire() -> None:
                while (job := turns.get()) is not None:
                    prefix, payload = job
                    table, info = tables[prefix], json.loads(payload)
                    me = info["player"]
                    other = next(x for x in table.names if x != me)
                    for _ in range(info["shots"]):
                        body = _fire_payload(table.keys[me], other, info["turn"], table.game, shots[prefix])
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


# -- the join burst ---------------------------------------------------------------


def derivation_times(samples: int = 3) -> list[float]:
    """Seconds per key derivation, one at a time (the referee's own KDF)."""
    times = []
    for i in range(samples):
        t0 = time.perf_counter()
        crypto.derive_team_key(f"kdf{i}", "bench-secret")
        times.append(time.perf_counter() - t0)
    return times


def join_burst(broker: Broker, teams: int) -> dict[str, float]:
    """``teams`` participation requests at once; meanwhile an admitted team
    moves a ship every 20 ms and times each placement until /approved."""
    prefix = f"burst{os.urandom(3).hex()}"
    t = Topics(prefix)
    flags = ["--max-players", str(teams + 1), "--placement-timeout", "3600"]
    with RefereeProcess(broker, [prefix], *flags) as ref:
        probe = Probe(broker, [t.players_list, t.approved("steady", "+")], "burst")
        try:
            key = crypto.derive_team_key("steady", "steady-secret")
            probe.publish(t.request_participation, json.dumps({"name": "steady", "secret": "steady-secret"}))
            probe.expect(lambda tp, p: tp == t.players_list and b'"steady"' in p, timeout=60)
            names = [f"burst{i:03d}" for i in range(teams)]
            admitted = threading.Event()
            last = [0.0]
            latencies: list[float] = []
            pending: dict[str, float] = {}
            lock = threading.Lock()

            def on_message(topic: str, payload: bytes, at: float) -> None:
                if topic == t.players_list:
                    listed = json.loads(payload) if payload else []
                    if len(listed) == teams + 1:
                        last[0] = at
                        admitted.set()
                    return
                if payload == b"true":
                    with lock:
                        sent = pending.pop(topic, None)
                    if sent is not None:
                        latencies.append((at - sent) * 1000)

            probe.on_message = on_message
            t0 = time.perf_counter()
            for name in names:
                probe.publish(t.request_participation, json.dumps({"name": name, "secret": f"{name}-secret"}))
            ship = SHIP_IDS[0]
            row = 0
            while not admitted.wait(0.02):
                row = (row + 1) % 5 + 5  # rows 5-9: never overlaps the other ships
                body = crypto.seal(key, json.dumps({"coordinates": f"0;{row}", "orientation": "HORIZONTAL"}))
                with lock:
                    pending[t.approved("steady", ship)] = time.perf_counter()
                probe.publish(t.place("steady", ship), body)
                if time.perf_counter() - t0 > 600:
                    raise TimeoutError("the burst was not admitted within 10 minutes")
            return {
                "burst_s": last[0] - t0,
                "other_p99_ms": percentile(latencies, 99),
                "other_p50_ms": percentile(latencies, 50),
                "other_samples": len(latencies),
                "peak_rss_mb": rss_mb(ref.pid, "VmHWM"),
            }
        finally:
            probe.close()


# -- memory -------------------------------------------------------------------------


def referee_rss(broker: Broker, arenas: int) -> float:
    prefixes = [f"mem{os.urandom(2).hex()}{i}" for i in range(arenas)]
    with RefereeProcess(broker, prefixes) as ref:
        time.sleep(1.0)  # settle after the start-up sweep
        return rss_mb(ref.pid)


# -- everything -------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    engine_games: int
    knockout_teams: int
    rtt_shots: int
    echo_msgs: int
    tput_arenas: int
    tput_seconds: float
    burst_teams: int

    @staticmethod
    def make(quick: bool) -> Plan:
        if quick:
            return Plan(200, 64, 100, 2000, 2, 1.5, 10)
        return Plan(5000, 1024, 2000, 20000, 4, 10.0, 100)


def run(
    broker: Broker | None, quick: bool, progress: Callable[[str], None] = lambda _s: None, only: set[str] | None = None
) -> Results:
    plan = Plan.make(quick)
    res = Results()
    cores = os.cpu_count() or 1
    res.meta.update(
        quick=quick,
        python=platform.python_version(),
        machine=platform.machine(),
        cores=cores,
        mosquitto=mosquitto_version(),
        plan=plan.__dict__,
        when=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )

    def wanted(part: str) -> bool:
        return only is None or part in only

    if wanted("engine"):
        progress(f"engine: {plan.engine_games} two-player games, {plan.engine_games // 4} four-player games")
        bench_engine(res, plan.engine_games)
        progress(f"engine: a {plan.knockout_teams}-team knockout")
        bench_knockout(res, plan.knockout_teams)
        if plan.knockout_teams != 1024:  # --quick: the full knockout, extrapolated from its games
            for suffix in ("s", "1core_s"):
                part = res.figures[f"engine.knockout_{plan.knockout_teams}_{suffix}"]
                res.put(f"engine.knockout_1024_{suffix}", part * 1023 / (plan.knockout_teams - 1))
    if only is not None and not only & {"e2e", "join", "memory"}:
        return res  # nothing that needs a broker
    with contextmanager_or(broker) as target:
        if wanted("e2e"):
            progress(f"e2e: {plan.rtt_shots} shots one by one, each after an echo round trip")
            echo, shots = rtt_pairs(target, plan.rtt_shots)
            res.put("e2e.echo_rtt_p50_ms", percentile(echo, 50))
            res.put("e2e.echo_rtt_p99_ms", percentile(echo, 99))
            res.put("e2e.shot_rtt_p50_ms", percentile(shots, 50))
            res.put("e2e.shot_rtt_p99_ms", percentile(shots, 99))
            res.put("e2e.rtt_ratio_p50", res.figures["e2e.shot_rtt_p50_ms"] / res.figures["e2e.echo_rtt_p50_ms"])
            progress(f"e2e: echo throughput ({plan.echo_msgs} messages), salvos in {plan.tput_arenas} arenas")
            res.put("e2e.echo_msgs_per_s", echo_throughput(target, plan.echo_msgs), 1)
            res.put("e2e.shots_per_s", shot_throughput(target, plan.tput_arenas, plan.tput_seconds), 1)
            res.put("e2e.throughput_ratio", res.figures["e2e.shots_per_s"] / res.figures["e2e.echo_msgs_per_s"])
        if wanted("join"):
            progress(f"join: key derivations timed around a burst of {plan.burst_teams} joins")
            # Timed just before and just after the burst: this machine's speed
            # drifts by 10-15% within a minute, and the ideal must be the one
            # of the minute the burst ran in.
            before = derivation_times()
            burst = join_burst(target, plan.burst_teams)
            kdf = statistics.median(before + derivation_times())
            res.put("join.kdf_s", kdf)
            res.put("join.burst_s", burst["burst_s"])
            res.put("join.ideal_s", plan.burst_teams * kdf / cores)
            res.put("join.burst_ratio", burst["burst_s"] / res.figures["join.ideal_s"])
            res.put("join.other_p50_ms", burst["other_p50_ms"])
            res.put("join.other_p99_ms", burst["other_p99_ms"])
            res.meta["join_other_samples"] = burst["other_samples"]
            res.put("memory.burst_peak_rss_mb", burst["peak_rss_mb"], 1)
        if wanted("memory"):
            progress("memory: a referee idle with 1 arena, then with 10")
            res.put("memory.idle_rss_mb", referee_rss(target, 1), 1)
            res.put("memory.arenas10_rss_mb", referee_rss(target, 10), 1)
    return res


@contextmanager
def contextmanager_or(broker: Broker | None) -> Iterator[Broker]:
    """The broker given, or a private mosquitto for the run."""
    if broker is not None:
        yield broker
        return
    with private_mosquitto() as own:
        yield own


if __name__ == "__main__":  # pragma: no cover - the echo peer's entry point
    if len(sys.argv) == 5 and sys.argv[1] == "echo":
        echo_main(*sys.argv[2:])
    else:
        sys.exit("usage: python -m salvo.perf echo URL IN OUT")
