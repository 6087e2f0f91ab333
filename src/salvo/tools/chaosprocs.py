"""What the chaos runs break: a throw-away mosquitto to stop and start again
(with persistence or without) and the referee process to kill, freeze and
restart. :mod:`salvo.tools.chaosdriver` drives them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Protocol

from salvo.net.mqtt import Broker
from salvo.tools.localbroker import Mosquitto
from salvo.tools.stress import RefereeProcess


class Restartable(Protocol):
    persistence: bool

    def start(self) -> None: ...
    def stop(self) -> None: ...


#: The fault runs' mosquitto: queues deep enough for a referee away a while, no Nagle.
CHAOS_TUNING: Final = ("max_queued_messages 10000", "set_tcp_nodelay true")


@contextlib.contextmanager
def throwaway_broker(persistence: bool = True) -> Iterator[tuple[Broker, Restartable]]:
    """A throw-away open mosquitto (the one launcher) this harness may stop
    and start, with persistence or not."""
    with Mosquitto.throwaway(persistence=persistence, tuning=CHAOS_TUNING) as own:
        yield own.broker, own


class ChaosReferee(RefereeProcess):
    """The referee process: key and state file in ``workdir`` (or ``state``), info-level log."""

    def __init__(self, broker: Broker, prefix: str, flags: list[str], workdir: Path, state: Path | None = None):
        super().__init__(broker, [prefix], *flags, "--log-level", "info", workdir=workdir, client_id="")
        if state is not None:
            self.args[self.args.index("--state") + 1] = str(state)
        self.state = Path(self.args[self.args.index("--state") + 1])
        self.since = 0  # the log's size when the latest run started

    def start(self, *extra: str) -> None:
        self.since = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([*self.args, *extra], stdout=out, stderr=subprocess.STDOUT)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill9(self) -> int | None:
        """SIGKILL (frozen or not); the exit code (-9, or how it had ended)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(10)

    def send(self, sig: signal.Signals) -> None:
        if self.running():
            os.kill(self.pid, sig)

    def terminate(self) -> int | None:
        if self.proc is None:
            return None
        self.send(signal.SIGCONT)
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            return self.kill9()

    def text(self, since: int = 0) -> str:
        with contextlib.suppress(OSError), self.log.open("rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")
        return ""

    def error(self) -> str:
        """What the latest run printed as its error (click's "Error: ..." and on)."""
        text = self.text(self.since)
        return " ".join(text[text.rfind("Error:") :].split()) if "Error:" in text else ""

    def tail(self, lines: int = 6) -> str:
        return " | ".join(self.text(max(0, self.log.stat().st_size - 4000)).splitlines()[-lines:])
