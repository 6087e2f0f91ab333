"""Load and abuse for the referee: many arenas at once, garbage floods.

Both start the real referee as a subprocess (so its memory can be read from
/proc) on a broker the caller names, and play real games with SDK bots.
The login given must be allowed everything (the referee's on a broker with
the shipped ACL, or any on an open broker).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from salvo.net.mqtt import Broker
from salvo.net.watch import NoReply, Recorder
from salvo.sdk.bots import make_strategy
from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import GameRecord
from salvo.spec.topics import Topics


def rss_mb(pid: int, field_name: str = "VmRSS") -> float:
    """A process's resident memory (VmRSS) or its peak (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


class RefereeProcess:
    """``python -m salvo referee`` as a subprocess for the given arenas.
    With the same ``workdir`` and ``client_id`` a restart is the same referee
    (state file, key, MQTT session); by default both are fresh. A
    ``client_id`` of "" leaves the referee its own default (derived from
    the key file)."""

    def __init__(
        self,
        broker: Broker,
        prefixes: list[str],
        *flags: str,
        workdir: Path | None = None,
        client_id: str | None = None,
    ) -> None:
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="salvo-referee-"))
        self.broker = broker
        self.prefixes = prefixes
        self.args = [
            sys.executable,
            "-m",
            "salvo",
            "referee",
            "--broker",
            broker.url,
            "--arenas",
            ",".join(prefixes),
            "--state",
            str(self.dir / "state.db"),
            "--key-file",
            str(self.dir / "referee.key"),
            *(["--client-id", client_id or f"stress-{os.urandom(3).hex()}"] if client_id != "" else []),
            "--log-level",
            "warning",
            *flags,
        ]
        if broker.password:
            self.args += ["--password", broker.password]
        self.log = self.dir / "referee.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL: no goodbye, no flush."""
        assert self.proc is not None
        self.proc.kill()
        assert self.proc.wait(10) == -9, "the referee had ended before the kill"
        self.kills += 1

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)

    def __enter__(self) -> RefereeProcess:
        """Start and wait until every arena says it is up."""
        watch = Recorder(self.broker, [Topics(p).server for p in self.prefixes], label="referee-watch")
        self.start()
        try:
            for p in self.prefixes:
                end = time.monotonic() + 30
                while True:
                    try:
                        watch.wait_for(Topics(p).server, "up", timeout=0.5)
                        break
                    except NoReply:
                        self.check_running()
                        if time.monotonic() > end:
                            raise
        finally:
            watch.close()
        return self

    def check_running(self) -> None:
        """RuntimeError when the process has exited (with the end of its log):
        a waiter learns it at once, not at the end of its timeout."""
        if self.proc is not None and (rc := self.proc.poll()) is not None:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"the referee exited with {rc}: {self.log}\n{tail}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __exit__(self, *_exc: object) -> None:
        self.stop()


errors: dict[str, str] = {}


def play_arena(broker: Broker, prefix: str, players: int, seed: int, out: dict[str, list[GameRecord]]) -> None:
    """``players`` SDK bots with mixed strategies play one game in ``prefix``."""
    kinds = ["density", "hunt-target", "random"]
    clients = [
        SalvoClient(
            f"p{i}", f"s{i}-{prefix}", broker, prefix=prefix, username=broker.username, password=broker.password
        ).connect()
        for i in range(players)
    ]
    threads = []
    for i, c in enumerate(clients):

        def run(c: SalvoClient = c, i: int = i) -> None:
            try:
                out[f"{prefix}/{c.name}"] = c.play(make_strategy(kinds[i % 3], f"{seed}/{prefix}/{i}"))
            except Exception as exc:  # reported as the run's problem, not lost with the thread
                errors[f"{prefix}/{c.name}"] = f"{type(exc).__name__}: {exc}"

        threads.append(threading.Thread(target=run, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for c in clients:
        c.close()


@dataclass
class ArenasResult:
    arenas: int
    players: int
    games_completed: int
    seconds: float
    referee_peak_rss_mb: float
    problems: list[str] = field(default_factory=list)


def run_arenas(broker: Broker, arenas: int = 10, players: int = 4, seed: int = 1) -> ArenasResult:
    """``arenas`` arenas of ``players`` bots each, one referee process, all at once."""
    prefixes = [f"stress{i}" for i in range(1, arenas + 1)]
    records: dict[str, list[GameRecord]] = {}
    t0 = time.monotonic()
    with RefereeProcess(
        broker,
        prefixes,
        "--min-players",
        str(players),
        "--max-players",
        str(players),
        "--turn-timeout",
        "10",
        "--reset-after",
        "600",
    ) as ref:
        threads = [threading.Thread(target=play_arena, args=(broker, p, players, seed, records)) for p in prefixes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        peak = rss_mb(ref.pid, "VmHWM")
    seconds = time.monotonic() - t0
    problems = []
    done = 0
    for p in prefixes:
        mine = [records.get(f"{p}/p{i}") for i in range(players)]
        if not all(r and len(r) == 1 for r in mine):
            why = "; ".join(f"{k}: {v}" for k, v in errors.items() if k.startswith(p + "/"))
            problems.append(f"{p}: a bot did not finish ({why or 'no error'})")
            continue
        winners = {r[0].winner for r in mine if r}
        places = sorted(r[0].mine.place for r in mine if r and r[0].mine)
        if len(winners) != 1 or places[0] != 1 or len(places) != players:
            problems.append(f"{p}: inconsistent results {winners} {places}")
            continue
        done += 1
    return ArenasResult(arenas, players, done, seconds, peak, problems)


@dataclass
class FloodResult:
    rate_asked: int
    seconds: float
    sent: int
    rate_achieved: float
    game_completed: bool
    winner: str | None
    referee_rss_before_mb: float
    referee_peak_rss_mb: float
    referee_rss_samples_mb: list[float]
    #: Garbage the referee received and rejected (its log); the broker drops
    #: QoS 0 messages a subscriber cannot take as fast as they come.
    referee_rejected: int = 0
    problems: list[str] = field(default_factory=list)


GARBAGE = [
    b"",
    b"\x00\xff",
    b"{",
    b"[]",
    b"null",
    b'{"data":null}',
    b"x" * 5000,
    b"[" * 500,
    b'{"name":"a b","secret":1}',
    "💥".encode() * 20,
]


def _flood(broker: Broker, topics: list[str], rate: int, seconds: float, seed: int, sent_box: Any) -> None:
    """Publish garbage at ``rate`` messages/s (QoS 0) for ``seconds``, in bursts of 100."""
    rng = random.Random(seed)
    flooder = Recorder(broker, label="stress-flood")
    sent = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        if sent > rate * elapsed:
            time.sleep(0.002)
            continue
        for _ in range(100):
            flooder.client.publish(rng.choice(topics), rng.choice(GARBAGE), qos=0)
        sent += 100
    sent_box.value = sent
    flooder.close()


def run_flood(broker: Broker, rate: int = 10_000, seconds: float = 10.0, seed: int = 1) -> FloodResult:
    """A game of two bots while garbage arrives at ``rate`` messages/s (QoS 0)
    on every inbound topic for ``seconds``."""
    prefix = "flood"
    t = Topics(prefix)
    # What hostile teams can reach behind the shipped ACL: the shared join
    # topic and their own players' topics (a team cannot publish as p0).
    topics = [
        t.request_participation,
        t.place("mallory", "carrier"),
        t.place("mallory", "x"),
        t.fire("mallory"),
        t.place("ghost", "destroyer"),
        t.fire("nobody"),
    ]
    records: dict[str, list[GameRecord]] = {}
    with RefereeProcess(broker, [prefix], "--turn-timeout", "10", "--reset-after", "600") as ref:
        before = rss_mb(ref.pid)
        samples: list[float] = []
        game = threading.Thread(target=play_arena, args=(broker, prefix, 2, seed, records), daemon=True)
        game.start()
        # The flooder gets a process of its own: in ours its tight loop would
        # starve the bots' network threads of the GIL.
        sent_box = multiprocessing.Value("i", 0)
        flooder = multiprocessing.get_context("fork").Process(
            target=_flood, args=(broker, topics, rate, seconds, seed, sent_box), daemon=True
        )
        start = time.monotonic()
        flooder.start()
        while flooder.is_alive():
            samples.append(round(rss_mb(ref.pid), 1))
            flooder.join(0.5)
        sent = sent_box.value
        achieved = sent / (time.monotonic() - start)
        game.join(600)
        peak = rss_mb(ref.pid, "VmHWM")
    rejected = (ref.dir / "referee.log").read_text(errors="replace").count(" reject ")
    mine = [records.get(f"{prefix}/p{i}") for i in range(2)]
    done = all(r and len(r) == 1 for r in mine)
    winner = mine[0][0].winner if done and mine[0] else None
    problems = [f"{k}: {v}" for k, v in errors.items() if k.startswith(prefix + "/")]
    return FloodResult(
        rate,
        seconds,
        sent,
        round(achieved),
        done,
        winner,
        round(before, 1),
        round(peak, 1),
        samples,
        rejected,
        problems,
    )
