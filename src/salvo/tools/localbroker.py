"""Brokers and peers on this machine, for the bench, the demo, the fault
harness and the tests: a free loopback port, the one mosquitto launcher
(:class:`Mosquitto`), an embedded amqtt (the demo: it needs no mosquitto
installed), and the echo peer the bench measures the broker with.

Run as ``python -m salvo.tools.localbroker echo URL IN OUT`` it is the echo peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import paho.mqtt.client as paho

from salvo.net.mqtt import Broker, new_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(ports: list[int], failed: Callable[[], str | None], timeout: float = 10.0) -> None:
    """Wait until every loopback ``port`` takes a connection. ``failed`` says
    why the server will never listen (it exited), or None to keep waiting."""
    end = time.monotonic() + timeout
    while True:
        try:
            for port in ports:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            why = failed()
            if why is None and time.monotonic() > end:
                why = f"nothing listens on port(s) {ports} after {timeout:g} s"
            if why is not None:
                raise RuntimeError(f"the broker did not start: {why}") from None
            time.sleep(0.02)


def server_binary(name: str) -> str:
    """Where a Debian server package's binary is (often /usr/sbin, not on PATH)."""
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/local/sbin/{name}", f"/usr/local/bin/{name}") if os.path.exists(p)),
        None,
    )
    if path is None:
        raise RuntimeError(f"{name} is not installed: apt-get install -y {name} (bash .ci/run does it)")
    return path


def mosquitto_binary() -> str:
    return server_binary("mosquitto")


def mosquitto_version() -> str:
    try:
        out = subprocess.run([mosquitto_binary(), "-h"], check=False, capture_output=True, text=True, timeout=5).stdout
    except (OSError, RuntimeError):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"


#: For measuring: deep queues, no in-flight limit, no Nagle (the bench).
BENCH_TUNING: Final = ("max_queued_messages 100000", "max_inflight_messages 0", "set_tcp_nodelay true")


class Mosquitto:
    """The one mosquitto launcher (the tests, the bench, the fault runs): a
    process on free loopback ports, started when it listens on every one of
    them (never after a sleep), restartable on the same ports, reloadable
    (SIGHUP). :meth:`config` is an open broker on :attr:`port`; the tests'
    subclass renders the project's own mosquitto.conf with its ACL and TLS."""

    #: how many loopback listeners :meth:`config` opens (:attr:`ports`)
    listeners = 1

    def __init__(self, workdir: Path, *, persistence: bool = True, tuning: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.persistence = persistence
        self.tuning = tuple(tuning)
        self.ports = [free_port() for _ in range(self.listeners)]
        self.conf = workdir / "mosquitto.conf"
        self.proc: subprocess.Popen[bytes] | None = None
        self._started = False

    @property
    def port(self) -> int:
        return self.ports[0]

    @property
    def broker(self) -> Broker:
        """The first listener, anonymous."""
        return Broker("127.0.0.1", self.port)

    def config(self) -> str:
        """An open broker (anonymous, every topic) on :attr:`port`."""
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true"]
        lines += [f"persistence {str(self.persistence).lower()}", f"persistence_location {self.workdir}/"]
        lines += [*self.tuning, f"log_dest file {self.workdir}/mosquitto.log"]
        return "\n".join(lines) + "\n" + run_as_me()

    def start(self, timeout: float = 10.0) -> None:
        for attempt in range(3):
            self.conf.write_text(self.config())
            try:
                self._start(timeout)
                break
            except RuntimeError as exc:
                # A free port taken by another process between free_port()
                # and the bind (other suites run beside this one): on a
                # first start, other ports will do; a restart must keep its own.
                if self._started or "Address already in use" not in str(exc) or attempt == 2:
                    raise
                self.ports = [free_port() for _ in self.ports]
        self._started = True

    def _start(self, timeout: float) -> None:
        self.proc = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        proc = self.proc

        def exited() -> str | None:
            if proc.poll() is None:
                return None
            err = proc.stderr.read().decode() if proc.stderr else ""
            return f"mosquitto exited: {err}\n{self.log()}"

        wait_listening(self.ports, exited, timeout)

    def reload(self, timeout: float = 10.0) -> None:
        """SIGHUP, as an organiser does after salvo teams/tls: mosquitto
        re-reads the password file, the ACL and the certificates. Returns
        once its log says so."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("mosquitto is not running")
        before = self.log().count("Reloading config.")
        self.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + timeout
        while self.log().count("Reloading config.") == before:
            if time.monotonic() > end:
                raise RuntimeError("mosquitto did not reload")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        path = self.workdir / "mosquitto.log"
        return path.read_text() if path.exists() else ""

    @classmethod
    @contextlib.contextmanager
    def throwaway(cls, *, persistence: bool = True, tuning: Sequence[str] = ()) -> Iterator[Mosquitto]:
        """An open one in a temporary directory, running while the block runs."""
        workdir = Path(tempfile.mkdtemp(prefix="salvo-mosquitto-"))
        own = cls(workdir, persistence=persistence, tuning=tuning)
        try:
            own.start()
            yield own
        finally:
            own.stop()
            shutil.rmtree(workdir, ignore_errors=True)


def run_as_me() -> str:
    """As root mosquitto drops to user "mosquitto", which cannot read our files."""
    return f"user {getpass.getuser()}\n" if os.geteuid() == 0 else ""


@contextlib.contextmanager
def private_mosquitto() -> Iterator[Broker]:
    """A throw-away open mosquitto on a free loopback port, tuned for
    measuring (no persistence, deep queues, no Nagle)."""
    with Mosquitto.throwaway(persistence=False, tuning=BENCH_TUNING) as own:
        yield own.broker


class EmbeddedBroker:
    """amqtt running on its own event loop in a background thread (no
    mosquitto needed). It speaks MQTT 3.1.1 only, hence ``?protocol=3`` in :attr:`url`."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="amqtt", daemon=True)
        self._broker: Any = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}?protocol=3"

    def start(self) -> EmbeddedBroker:
        from amqtt.broker import Broker as AmqttBroker

        for noisy in ("amqtt", "transitions"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{self.port}"}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
        self._thread.start()

        async def start() -> Any:
            broker = AmqttBroker(config, loop=self._loop)
            await broker.start()
            return broker

        self._broker = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._broker is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._broker.shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


# -- the echo peer ---------------------------------------------------------------------


def broker_url(broker: Broker) -> str:
    """``broker`` as a URL another process can take (credentials included)."""
    login = [urllib.parse.quote(part or "", safe="") for part in (broker.username, broker.password)]
    auth = f"{login[0]}:{login[1]}@" if broker.username else ""
    query = "" if broker.mqtt5 else "?protocol=3"
    urls = [f"mqtt://{f'[{host}]' if ':' in host else host}:{port}{query}" for host, port in broker.endpoints]
    urls[0] = urls[0].replace("mqtt://", f"mqtt://{auth}", 1)
    return ",".join(urls)


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


@contextlib.contextmanager
def echo_peer(broker: Broker, inbound: str, outbound: str) -> Iterator[None]:
    """The echo peer in a process of its own (as the referee runs), while the block runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "salvo.tools.localbroker", "echo", broker_url(broker), inbound, outbound],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":  # pragma: no cover - the echo peer's entry point
    if len(sys.argv) == 5 and sys.argv[1] == "echo":
        echo_main(*sys.argv[2:])
    else:
        sys.exit("usage: python -m salvo.tools.localbroker echo URL IN OUT")
