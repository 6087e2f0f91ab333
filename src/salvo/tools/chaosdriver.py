"""The machinery of ``salvo stress chaos``: :class:`Run` plays games with
three scripted teams and calls the scenario's fault at named points. What it
breaks (a broker, the referee process) is :mod:`salvo.tools.chaosprocs`', its
witness of the arena :mod:`salvo.tools.chaoswatch`'s, and
:mod:`salvo.tools.gamemodel` judges each game."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho

from salvo.net.mqtt import Broker
from salvo.net.watch import Msg
from salvo.spec import crypto, payloads
from salvo.spec.rules import Orientation, Placement, cell
from salvo.spec.topics import Outbound, Topics
from salvo.tools.chaosprocs import ChaosReferee, Restartable
from salvo.tools.chaoswatch import Watcher, on
from salvo.tools.gamemodel import SHIPS, GameModel, Violation, check, random_fleet

TEAMS = ("alice", "bob", "carol")
KILLS = {
    "lobby": "in the lobby",
    "derive": "during a key derivation",
    "placement": "mid-placement",
    "salvo": "mid-salvo",
    "journal": "between journal and publish",
    "over": "at game over",
    "reset": "at the reset",
    "random": "at a random instant",
}
DAMAGES = {"truncate": "truncated to 0", "wal": "-wal deleted", "delete": "all files deleted"}
WHEN = {"down": "after a kill", "live-kill": "while running, then kill -9", "live-stop": "while running, then SIGTERM"}
SECONDS = {"same-state": "the same state file", "same-key": "the same key (client id)", "other-key": "another key"}


#: Watches a spool file (argv 1) and SIGSTOPs a process (argv 2) the moment it grows.
_STOPPER = """
import os, signal, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
size, end = os.fstat(fd).st_size, time.monotonic() + 2
print("watching", file=sys.stderr, flush=True)
while os.fstat(fd).st_size == size and time.monotonic() < end:
    pass
os.kill(int(sys.argv[2]), signal.SIGSTOP)
"""


class Stalled(Exception):
    """The game cannot go on: what it waited for never came."""


class GiveUp(Exception):
    """The game was given up on purpose (its state file is gone: a new one starts)."""


BrokerFactory = Callable[[bool], contextlib.AbstractContextManager[tuple[Broker, Restartable]]]


@dataclass
class Options:
    broker: Broker  # a login allowed everything
    workdir: Path
    seed: int = 1
    games: int = 1
    kills: int = 10
    #: a broker this harness may stop and start, with persistence or not (the broker scenarios)
    own_broker: BrokerFactory | None = None
    #: a bounded sample (CI): fewer variants, shorter outages
    sample: bool = False


@dataclass
class Fault:
    label: str
    mark: int  # the watcher's log index when it was injected
    outcome: dict[str, Any] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)


class Run:
    """One arena: a referee process, a watcher that also publishes for the
    teams, games the model predicts, the faults injected and what broke."""

    def __init__(self, o: Options, scenario: str, n: int, turn_timeout: float = 30.0, broker: Broker | None = None):
        self.o, self.scenario = o, scenario
        self.broker = broker or o.broker
        self.prefix = f"chaos-{scenario}-{os.urandom(3).hex()}"
        self.t = Topics(self.prefix)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{scenario}-", dir=o.workdir))
        self.rng = random.Random(f"{o.seed}/{scenario}/{n}")
        self.bg = random.Random(f"{o.seed}/{scenario}/{n}/background")
        self.turn_timeout = turn_timeout
        self.flags = ["--seed", str(o.seed), "--turn-timeout", f"{turn_timeout:g}", "--placement-timeout", "60"]
        self.flags += ["--reset-after", "1.5", "--min-players", "3", "--max-players", "3"]
        self.ref = ChaosReferee(self.broker, self.prefix, self.flags, self.dir)
        self.watch = Watcher(self.broker, self.prefix)
        self.faults: list[Fault] = []
        self.found: list[Violation] = []
        self.lock = threading.RLock()  # one fault at a time
        self.up = threading.Event()  # set while the referee is meant to run
        self.at: dict[tuple[str, int], str] = {}  # (point, n) -> fault to inject there, this game
        self.inject: Callable[[Run, str], None] = lambda _r, _a: None
        self.on_exit: Callable[[Run, int], bool] = lambda _r, _c: False
        self.pending: list[Callable[[], None]] = []  # to do once the salvo is sent
        self.sent: list[tuple[str, str]] = []  # the salvo's messages (sent again after a broker cut)
        self.infos: list[paho.MQTTMessageInfo] = []
        self.ids: set[str] = set()
        self.game_id, self.joining, self.shot = "", "", (0, 0, "")
        self.log_at = 0  # the referee log's size before the latest join
        self.games = 0
        self.loose: set[int] = set()
        self.cut: int | None = None  # where an abandoned game's log ends
        self.restartable: Restartable | None = None
        self.cleanup: list[Callable[[], None]] = []  # after the referee stopped
        #: a scenario's documented tolerance: a verdict of the model it does not count (kept in ``tolerated``)
        self.tolerate: Callable[[Violation], bool] = lambda _v: False
        self.tolerated: list[Violation] = []
        self.unordered = False  # a salvo's shots may be numbered in another order (check's unordered)
        self.game_start = 0

    # -- the referee ---------------------------------------------------------------------

    def start(self, *extra: str) -> int | None:
        """Start the referee: None once it says up, else its exit code."""
        mark = self.watch.mark()
        self.ref.start(*extra)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if self.watch.wait(lambda m: m.topic == self.t.server and m.payload == b"up", mark, 0.2):
                self.up.set()
                return None
            assert self.ref.proc is not None
            if (code := self.ref.proc.poll()) is not None:
                return code
        raise Stalled(f"the referee did not come up within 30 s: {self.ref.tail()}")

    def kill(self, label: str, down: float | None = None) -> Fault:
        """kill -9 now; started again after ``down`` s (random, < 0.8 s), in the background."""
        while True:
            if not self.up.wait(60):
                raise Stalled("the referee never came back up")
            with self.lock:
                if self.up.is_set():
                    fault = self.kill_only(label)
                    break
        delay = self.bg.uniform(0, 0.8) if down is None else down
        threading.Thread(target=self._restart, args=(delay,), daemon=True).start()
        return fault

    def kill_only(self, label: str) -> Fault:
        """kill -9 now, without starting it again (the caller does, or not)."""
        self.up.clear()
        code = self.ref.kill9()
        fault = self.fault(label)
        if code != -9:
            self.violation("stalled", f"the referee had stopped by itself (exit {code}) before the kill")
        return fault

    def _restart(self, delay: float) -> None:
        time.sleep(delay)
        try:
            if (code := self.start()) is not None:
                self.violation("refusal", f"the restarted referee exited with {code}: {self.ref.tail()}")
        except Stalled as exc:
            self.violation("stalled", str(exc))

    def fault(self, label: str, **outcome: Any) -> Fault:
        self.faults.append(fault := Fault(label, self.watch.mark(), outcome))
        return fault

    def violation(self, kind: str, text: str) -> None:
        self.found.append(Violation(kind, text, self.watch.mark()))

    # -- waiting and sending ---------------------------------------------------------

    def await_(self, pred: Callable[[Msg], bool], after: int, what: str, timeout: float | None = None) -> Msg:
        return self.watch.messages[self.await_index(pred, after, what, timeout)]

    def await_index(self, pred: Callable[[Msg], bool], after: int, what: str, timeout: float | None = None) -> int:
        """Wait for a message (its index); a referee that stopped by itself
        meanwhile is the scenario's to judge (on_exit), or the game stalls."""
        end = time.monotonic() + (timeout or self.turn_timeout + 30)
        while True:
            if found := self.watch.wait(pred, after, 0.25):
                return found[0]
            if self.up.is_set() and not self.ref.running():
                assert self.ref.proc is not None
                code = self.ref.proc.returncode
                if not self.on_exit(self, code):
                    raise Stalled(f"the referee exited with {code} while waiting for {what}: {self.ref.tail()}")
            if time.monotonic() > end:
                raise Stalled(f"waited {timeout or self.turn_timeout + 30:g} s in vain for {what}")

    def publish(self, topic: str, payload: str) -> None:
        self.infos.append(self.watch.publish(topic, payload))

    def flush(self) -> None:
        """Wait until the broker has everything published so far."""
        for info in self.infos:
            with contextlib.suppress(RuntimeError, ValueError):
                info.wait_for_publish(10)
        self.infos = []

    def point(self, name: str, n: int) -> None:
        if action := self.at.pop((name, n), None):
            self.inject(self, action)

    def settle(self) -> int:
        """A marker round trip: what the referee published before is in the
        log (the broker delivers in order); where the log is now."""
        marker, token = self.t.tool_marker("chaos"), os.urandom(6).hex()
        before = self.watch.mark()
        self.publish(marker, token)
        self.await_(on(marker, equals=token.encode()), before, "our marker")
        return self.watch.mark()

    def untouched(self, mark: int, who: str) -> None:
        """Nothing but markers since ``mark`` (two round trips: the broker has
        read everything the other process sent before it exited)."""
        self.settle()
        end = self.settle()
        for i in range(mark, end):
            m = self.watch.messages[i]
            # (markers, and the first referee's own sweep and probes, are nobody's touch)
            if m.topic not in (self.t.tool_marker("chaos"), self.t.sweep, self.t.probe):
                self.found.append(Violation("touched", f"{who} published {m.topic} = {m.text[:80]!r}", i))

    def probe(self) -> None:
        """Until the referee answers: a join with a bad name, refused on
        /game/errors with our request id (the model ignores ``probe-`` ids)."""
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if not self.ref.running():
                raise Stalled(f"the referee exited with {self.ref.exit_code()}: {self.ref.tail()}")
            rid = f"probe-{os.urandom(4).hex()}"
            mark = self.watch.mark()
            self.publish(self.t.request_participation, json.dumps({"name": "chaos probe", "request_id": rid}))
            answer = f'"request_id":"{rid}"'.encode()
            if self.watch.wait(on(self.t.errors, has=answer), mark, 1.0):
                return
        raise Stalled("the referee did not answer once the broker was back")

    def durable(self) -> None:
        """Every hit published in this game is a shot the journal holds."""
        from salvo.arena.journal import Store
        from salvo.game.events import Fire

        store = Store(self.ref.state, writer=False)
        try:
            events = store.current_game(self.prefix)[1]
        finally:
            store.close()
        count: Counter[int] = Counter()
        shots = set()
        for ev in events:
            if isinstance(ev, Fire) and ev.turn is not None and ev.game is not None:  # (the referee binds its shots)
                count[ev.turn] += 1
                # The hit the engine publishes for it, made as the engine makes it.
                hit = payloads.hit(
                    self.t.hit(ev.target), cell(ev.x, ev.y), ev.turn, count[ev.turn], payloads.hit_end(ev.game)
                )
                shots.add((hit.topic, hit.payload))
        for i in range(self.game_start, self.watch.mark()):
            m = self.watch.messages[i]
            route = self.t.parse_outbound(m.topic)
            if route is not None and route.kind is Outbound.HIT and (m.topic, m.text) not in shots:
                self.found.append(Violation("lost", f"published {m.topic} {m.text}, not in the journal", i))

    def retained(self) -> dict[str, str]:
        """What the broker holds retained for the arena now (a new subscriber's view)."""
        look = Watcher(self.broker, self.prefix)
        try:
            token = os.urandom(6).hex()
            look.publish(self.t.tool_marker("chaos"), token)
            if look.wait(lambda m: m.text == token, 0, 10) is None:
                raise Stalled("no marker back from the broker")
            return {m.topic: m.text for m in look.messages if m.retain and m.payload}
        finally:
            look.close()

    # -- one game ----------------------------------------------------------------------

    def play_game(self) -> None:
        """A game from the lobby to the next one (or given up), judged by the model."""
        start = self.game_start = self.watch.mark()
        self.games += 1
        rng, t = self.rng, self.t
        joined, order = rng.sample(TEAMS, 3), rng.sample(TEAMS, 3)
        secrets = {n: f"{n}-{self.games}-{rng.randrange(10**6)}" for n in TEAMS}
        model = GameModel({n: random_fleet(rng) for n in TEAMS}, joined, order)
        complete, self.loose, self.cut = False, set(), None
        try:
            found = self.await_(lambda m: m.topic == t.game_id and bool(m.payload) and m.text not in self.ids, 0, "id")
            self.game_id = found.text
            self.ids.add(self.game_id)
            self.point("game", 0)
            for i, name in enumerate(joined):
                self.joining = name
                self.log_at = self.ref.log.stat().st_size if self.ref.log.exists() else 0
                self.publish(t.request_participation, payloads.join_request(name, secrets[name]))
                self.point("join", i)
                self.await_(on(t.players_list, has=f'"{name}"'.encode()), start, f"{name} listed")
                self.point("listed", i)
            for i, name in enumerate(order):
                key = crypto.derive_team_key(name, secrets[name])
                for k, (ship, (x, y, o)) in enumerate(model.fleets[name].items()):
                    place = payloads.placement(Placement(x, y, Orientation(o)))
                    self.publish(t.place(name, ship), crypto.seal(key, place))
                    self.point("place", 5 * i + k)
                for ship in SHIPS:
                    topic = t.approved(name, ship)
                    self.await_(on(topic, equals=b"true"), start, topic)
            first = self.await_(on(t.turn, starts=b'{"turn":1,'), start, "turn 1")
            if first.json().get("player") not in order:
                raise Stalled(f"turn 1 went to {first.text}")
            model.start(first.json()["player"])
            while not model.over:
                n, shooter = model.turn, model.current
                head = f'{{"turn":{n},'.encode()
                at = self.await_index(on(t.turn, starts=head), start, f"turn {n}")
                # its batch ends with /game/current: the referee is idle now
                self.await_(on(t.current, equals=shooter.encode()), at, f"turn {n}: current")
                self.point("turn", n)
                target, cells = model.plan(rng)
                model.apply(target, cells)
                self.salvo(n, crypto.derive_team_key(shooter, secrets[shooter]), target, cells, model.over)
                self.await_(on(t.salvo, starts=head), start, f"salvo {n}")
            self.await_(on(t.state, equals=b"over"), start, "game over")
            self.point("reset", 0)
            self.await_(lambda m: m.topic == t.game_id and bool(m.payload) and m.text not in self.ids, start, "reset")
            complete = True
        except GiveUp:
            pass
        except Stalled as exc:
            self.violation("stalled", str(exc))
            raise
        finally:
            end = self.cut if self.cut is not None else self.watch.mark()
            log = self.watch.messages  # live, still growing: check() reads below `end` only
            loose, unordered = frozenset(self.loose), self.unordered
            for v in check(model, log, start, end, self.prefix, complete=complete, loose=loose, unordered=unordered):
                (self.tolerated if self.tolerate(v) else self.found).append(v)

    def salvo(self, n: int, key: bytes, target: str, cells: list[tuple[int, int]], over: bool) -> None:
        self.sent = []
        for k, (x, y) in enumerate(cells, 1):
            data = payloads.fire_data(x, y, target, n, self.game_id)
            self.sent.append((self.t.fire(target), json.dumps(crypto.sign(key, data))))
            self.shot = (n, k, target)
            if self.at.pop(("journal", 10 * n + k), None):
                self.kill_between_journal_and_publish(*self.sent[-1])
            else:
                self.publish(*self.sent[-1])
            self.point("shot", 10 * n + k)
        if over:
            self.point("over", 0)
        while self.pending:
            self.pending.pop(0)()

    def kill_between_journal_and_publish(self, topic: str, payload: str) -> None:
        """Send the shot and kill the referee between journaling it and
        publishing its hit. With strace: SIGKILL injected at the referee's
        next sendto (the hit's), which is skipped. Without: SIGSTOP the
        moment the spool grows, then SIGKILL (a race: the window is some
        50 us, about what a SIGSTOP takes to land)."""
        n, k, target = self.shot
        self.up.wait(60)
        with self.lock:
            mark, spool = self.watch.mark(), Path(f"{self.ref.state}-spool")
            size = spool.stat().st_size
            how = "strace" if shutil.which("strace") else "sigstop"
            if how == "strace":
                inject = "sendto:error=ENOBUFS:signal=SIGKILL:when=1"
                cmd = ["strace", "-f", "-o", "/dev/null", "-e", "trace=sendto", "-e", f"inject={inject}"]
                tracer = subprocess.Popen([*cmd, "-p", str(self.ref.pid)], stderr=subprocess.PIPE, text=True)
            else:
                tracer = subprocess.Popen(
                    [sys.executable, "-c", _STOPPER, str(spool), str(self.ref.pid)], stderr=subprocess.PIPE, text=True
                )
            assert tracer.stderr is not None
            tracer.stderr.readline()  # "Process N attached with 4 threads", or "watching"
            self.publish(topic, payload)
            try:
                tracer.wait(5)
            except subprocess.TimeoutExpired:
                tracer.kill()
                tracer.wait()
            grew = spool.stat().st_size > size
            hit = f'"turn":{n},"shot":{k},'.encode()  # (the game follows: v2.1)
            told = self.watch.wait(lambda m: m.topic == self.t.hit(target) and hit in m.payload, mark, 0.3)
            fault = self.kill(KILLS["journal"], down=self.bg.uniform(0, 0.5))
        fault.outcome.update(journaled=grew, published=told is not None, how=how)

    def close(self) -> list[Fault]:
        """Stop everything, charge each violation to the fault before it."""
        self.ref.terminate()
        for undo in self.cleanup:
            undo()
        for topic in {m.topic for m in self.watch.messages if m.retain and m.payload}:
            self.watch.publish(topic, "", retain=True)  # leave the broker clean
        self.flush()
        self.watch.close()
        unowned = Fault("no fault (before the first)", -1)
        for v in self.found:
            owner = max((f for f in self.faults if f.mark <= v.at), key=lambda f: f.mark, default=unowned)
            owner.violations.append(v)
        return self.faults + ([unowned] if unowned.violations else [])
