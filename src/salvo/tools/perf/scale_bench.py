"""``salvo bench scale``: how far one referee process goes, and what more
processes add.

* many arenas in one process: the time until every arena says ``up``, the
  resident memory per arena, the CPU the process takes while they idle;
* one busy arena among them: a shot's round trip (fire -> /hit) beside a
  bare paho echo through the same broker at the same time, then a whole
  game played by SDK bots in the last arena;
* SIGTERM at that load: the time until the process has exited, and how
  many arenas the broker then shows as ``down`` (every one must);
* salvo throughput with the same arenas shared out to 1, 2 and 4 referee
  processes (``--arenas`` ranges, as an organiser shards a league).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from salvo.net.mqtt import Broker
from salvo.sdk.outcomes import GameRecord
from salvo.spec.topics import Topics, any_arena
from salvo.tools.perf.broker_bench import pipelined_salvos, shot_rtt
from salvo.tools.perf.probe import Probe
from salvo.tools.perf.results import Results, percentile
from salvo.tools.stress import RefereeProcess, errors, play_arena, rss_mb

#: figure -> (limit, comparison): the targets of issue #19.
TARGETS: dict[str, tuple[float, str]] = {
    "scale.arenas_up": (1000, ">="),
    "scale.busy_rtt_ratio_p99": (3.0, "<="),
    "scale.sigterm_s": (2.0, "<="),
    "scale.arenas_not_down": (0, "<="),
    "scale.busy_arena_played": (1, ">="),
}


@dataclass(frozen=True)
class ScalePlan:
    arenas: int
    rtt_shots: int
    idle_seconds: float
    tput_arenas: int
    tput_seconds: float
    processes: tuple[int, ...]

    @staticmethod
    def make(quick: bool, arenas: int | None = None) -> ScalePlan:
        if quick:
            return ScalePlan(arenas or 20, 50, 0.5, 4, 1.0, (1, 2))
        return ScalePlan(arenas or 1000, 1000, 5.0, 8, 8.0, (1, 2, 4))


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Presence:
    """``/game/server`` of every arena, as the broker says it."""

    def __init__(self, broker: Broker, prefixes: list[str]) -> None:
        self.wanted = {Topics(p).server for p in prefixes}
        self.state: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self.probe = Probe(broker, [], "presence")
        self.probe.on_message = self._seen
        # One wildcard, not one filter per arena: NATS makes every QoS 1
        # subscription a JetStream consumer.
        self.probe.subscribe([any_arena(Topics().server)])

    def _seen(self, topic: str, payload: bytes, _at: float) -> None:
        if topic not in self.wanted:
            return
        with self._cond:
            self.state[topic] = payload
            self._cond.notify_all()

    def count(self, payload: bytes) -> int:
        with self._cond:
            return sum(1 for t in self.wanted if self.state.get(t) == payload)

    def wait_all(self, payload: bytes, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.count(payload) == len(self.wanted), timeout)

    def close(self) -> None:
        self.probe.close()


def run_scale(
    broker: Broker,
    res: Results,
    plan: ScalePlan,
    progress: Callable[[str], None] = lambda _s: None,
    broker_pids: list[int] | None = None,
) -> None:
    """Every figure of the module docstring into ``res``; ``broker_pids``:
    the broker's processes, whose CPU is measured while the arenas idle."""
    tag = os.urandom(2).hex()
    prefixes = [f"s{tag}a{i}" for i in range(1, plan.arenas + 1)]
    res.meta["scale_plan"] = plan.__dict__
    progress("scale: one referee process with 1 arena, for the memory baseline")
    with RefereeProcess(broker, [f"s{tag}base"]) as base:
        time.sleep(1.0)  # settle after the start-up sweep
        baseline = rss_mb(base.pid)
    progress(f"scale: {plan.arenas} arenas in one referee process")
    presence = _Presence(broker, prefixes)
    ref = RefereeProcess(broker, prefixes, "--turn-timeout", "600", "--placement-timeout", "600")
    try:
        t0 = time.monotonic()
        ref.start()
        everyone = False
        while not everyone and time.monotonic() - t0 < 300:
            everyone = presence.wait_all(b"up", timeout=1.0)
            ref.check_running()  # (exited: said now, not after 300 s)
        res.put("scale.up_s", time.monotonic() - t0, 2)
        res.put("scale.arenas_up", presence.count(b"up"), 0)
        if not everyone:
            raise RuntimeError(f"only {presence.count(b'up')} of {plan.arenas} arenas came up in 300 s: {ref.log}")
        time.sleep(1.0)
        rss = rss_mb(ref.pid)
        res.put("scale.rss_mb", rss, 1)
        res.put("scale.rss_per_arena_kb", (rss - baseline) * 1024 / max(1, plan.arenas - 1), 1)
        pids = [ref.pid, *(broker_pids or [])]
        cpu0, w0 = [_cpu_s(pid) for pid in pids], time.monotonic()
        time.sleep(plan.idle_seconds)
        idle = [100 * (_cpu_s(pid) - c0) / (time.monotonic() - w0) for pid, c0 in zip(pids, cpu0, strict=True)]
        res.put("scale.idle_cpu_pct", idle[0], 2)
        if broker_pids:
            res.put("scale.broker_idle_cpu_pct", sum(idle[1:]), 1)
        progress("scale: a team's subscription (QoS 1, as the SDK makes it)")
        res.put("scale.team_subscribe_ms", 1000 * _team_subscribe_s(broker, prefixes[-3]), 3)
        try:
            _busy_arena(broker, prefixes, res, plan, progress)
            res.put("scale.busy_arena_played", 1, 0)
        except (TimeoutError, queue.Empty, RuntimeError) as exc:
            # Measured as what it is: at this load the arena could not play.
            res.put("scale.busy_arena_played", 0, 0)
            res.meta["busy_arena_failed"] = f"{type(exc).__name__}: {exc}"

        progress("scale: SIGTERM")
        assert ref.proc is not None
        t0 = time.monotonic()
        ref.proc.send_signal(signal.SIGTERM)
        try:
            ref.proc.wait(60)
            res.put("scale.sigterm_s", time.monotonic() - t0, 3)
        except subprocess.TimeoutExpired:
            res.put("scale.sigterm_s", float("inf"))  # a measured miss: SIGTERM did not end it
            ref.kill()
        presence.wait_all(b"down", timeout=10)
        res.put("scale.arenas_not_down", plan.arenas - presence.count(b"down"), 0)
    finally:
        ref.stop()
        presence.close()
    for n in plan.processes:
        progress(f"scale: salvos in {plan.tput_arenas} arenas shared out to {n} referee process(es)")
        res.put(f"scale.shots_per_s_{n}proc", sharded_throughput(broker, plan.tput_arenas, n, plan.tput_seconds), 1)


def _busy_arena(
    broker: Broker, prefixes: list[str], res: Results, plan: ScalePlan, progress: Callable[[str], None]
) -> None:
    progress(f"scale: {plan.rtt_shots} shots in arena {prefixes[-2]}, echoes beside them, the others idle")
    echoes, shots = shot_rtt(broker, prefixes[-2], plan.rtt_shots)
    for name, values in (("echo", echoes), ("busy_shot", shots)):
        res.put(f"scale.{name}_rtt_p50_ms", percentile(values, 50))
        res.put(f"scale.{name}_rtt_p99_ms", percentile(values, 99))
    res.put("scale.busy_rtt_ratio_p99", percentile(shots, 99) / percentile(echoes, 99))
    progress(f"scale: a whole game by two SDK bots in the last arena, {prefixes[-1]}")
    res.put("scale.full_game_s", _full_game(broker, prefixes[-1]), 2)


def _team_subscribe_s(broker: Broker, prefix: str) -> float:
    """Seconds from a team's SUBSCRIBE (the SDK's one filter, QoS 1) to the SUBACK."""
    probe = Probe(broker, [], "team-subscribe")
    try:
        t0 = time.monotonic()
        probe.subscribe([Topics(prefix).team_filter], timeout=120)
        return time.monotonic() - t0
    finally:
        probe.close()


def _full_game(broker: Broker, prefix: str) -> float:
    """Two SDK bots play ``prefix``'s game to the end; seconds it took."""
    records: dict[str, list[GameRecord]] = {}
    t0 = time.monotonic()
    play_arena(broker, prefix, 2, 1, records)
    took = time.monotonic() - t0
    if sum(len(v) == 1 for v in records.values()) != 2:
        ours = {k: v for k, v in errors.items() if k.startswith(f"{prefix}/")}
        raise RuntimeError(f"the game in {prefix} did not finish: {ours or records}")
    return took


@contextlib.contextmanager
def shards(broker: Broker, prefixes: list[str], processes: int, *flags: str) -> Iterator[list[RefereeProcess]]:
    """``prefixes`` shared out to ``processes`` referee processes, each up."""
    with contextlib.ExitStack() as stack:
        size = -(-len(prefixes) // processes)
        yield [
            stack.enter_context(RefereeProcess(broker, prefixes[i : i + size], *flags))
            for i in range(0, len(prefixes), size)
        ]


def sharded_throughput(broker: Broker, arenas: int, processes: int, seconds: float) -> float:
    """Pipelined salvos in ``arenas`` arenas shared out to ``processes``
    referee processes; shots/s counted by the /hit messages that came back."""
    prefixes = [f"sh{os.urandom(2).hex()}{i}" for i in range(arenas)]
    with shards(broker, prefixes, processes, "--turn-timeout", "600", "--placement-timeout", "600"):
        return pipelined_salvos(broker, prefixes, seconds)
