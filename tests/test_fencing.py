"""Split brain, with real processes (docs/reliability.md, fencing): a
referee frozen past its last will, another taking its arena over, the
frozen one waking. The review saw the woken one publish 29-32 messages from
before its freeze (hits, salvos, turns, its whole retained state) and, 3
times in 6, the rightful holder stop too on seeing the old lease: no
referee left. Now the woken one publishes nothing and exits non-zero, and
the holder plays on."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from salvo.referee.ownership import Lease

from conftest import BrokerFactory
from mqttkit import Recorder


def _referee(url: str, prefix: str, workdir: Path, name: str) -> subprocess.Popen[str]:
    files = ["--state", str(workdir / f"{name}.db"), "--key-file", str(workdir / f"{name}.key")]
    return subprocess.Popen(
        [sys.executable, "-m", "salvo", "referee", "--broker", url, "--prefix", prefix, *files],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.long  # the broker takes 1.5 keep-alives (45 s) to call the frozen referee gone
def test_a_frozen_referee_wakes_without_rewriting_history(new_broker: BrokerFactory, tmp_path: Path) -> None:
    mosq = new_broker("fencing")
    mosq.start()
    prefix, url = "fenced", mosq.url("referee")
    P = f"/{prefix}"
    watch = Recorder(mosq, "referee", [f"{P}/game/#"])
    a = _referee(url, prefix, tmp_path, "a")
    b: subprocess.Popen[str] | None = None
    try:
        watch.wait_for(f"{P}/game/server", "up", timeout=30)
        lease_a = Lease.parse(watch.wait(lambda m: m.topic == f"{P}/game/lease" and bool(m.payload)).payload)
        assert lease_a is not None
        a.send_signal(signal.SIGSTOP)  # a laptop lid, a VM pause
        mark = watch.mark()
        watch.wait(lambda m: m.topic == f"{P}/game/server" and m.payload == b"down", after=mark, timeout=90)
        b = _referee(url, prefix, tmp_path, "b")  # another machine's referee takes the arena over
        taken = watch.mark()
        watch.wait(lambda m: m.topic == f"{P}/game/server" and m.payload == b"up", after=taken, timeout=30)
        lease_b = Lease.parse(watch.latest(f"{P}/game/lease").payload)  # type: ignore[union-attr]
        assert lease_b is not None and lease_b.newer_than(lease_a) and lease_b.gen > lease_a.gen
        game_b = watch.text(f"{P}/game/id")
        woken = watch.mark()
        a.send_signal(signal.SIGCONT)
        code = a.wait(30)
        watch.sync(f"{P}/game/sweep")  # everything the broker took from anyone before now is here
        said = [m for m in watch.since(woken) if m.topic != f"{P}/game/sweep"]
        # the woken referee said nothing: no old lease, no old game, no 'down' over the holder's 'up'
        assert not [m for m in said if m.topic == f"{P}/game/lease" and Lease.parse(m.payload) == lease_a], said
        assert watch.text(f"{P}/game/id") == game_b and watch.text(f"{P}/game/server") == "up"
        assert code != 0, a.stderr.read() if a.stderr else ""
        assert b.poll() is None  # the holder plays on
    finally:
        watch.close()
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                proc.wait(10)
