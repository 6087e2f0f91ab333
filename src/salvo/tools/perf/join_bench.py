"""The referee under load: a burst of joins (argon2id each) against the
ideal ``n x one derivation / cores``, the latency of other messages
meanwhile, and the referee's resident memory."""

from __future__ import annotations

import json
import os
import threading
import time

from salvo.net.mqtt import Broker
from salvo.spec import crypto, payloads
from salvo.spec.rules import SHIP_IDS, Orientation, Placement
from salvo.spec.topics import Topics
from salvo.tools.perf.probe import Probe
from salvo.tools.perf.results import percentile
from salvo.tools.stress import RefereeProcess, rss_mb


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
            probe.publish(t.request_participation, payloads.join_request("steady", "steady-secret"))
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
                probe.publish(t.request_participation, payloads.join_request(name, f"{name}-secret"))
            ship = SHIP_IDS[0]
            row = 0
            while not admitted.wait(0.02):
                row = (row + 1) % 5 + 5  # rows 5-9: never overlaps the other ships
                body = crypto.seal(key, payloads.placement(Placement(0, row, Orientation.HORIZONTAL)))
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
