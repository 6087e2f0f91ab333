"""A NATS cluster on this machine: JetStream and the MQTT listener on every
node, routes between them, all on loopback. For the failover test, ``salvo
bench scale --nats`` and an organiser's rehearsal of a clustered league.

NATS (2.9, Debian's ``nats-server``) speaks MQTT 3.1.1: retained messages
and sessions live in JetStream streams, replicated to every node
(``stream_replicas``), so a client that loses its node resumes its session
on another. What it takes (measured, see docs/scaling.md):

* JetStream needs a meta leader before the first MQTT client can connect;
  a node is ready when its MQTT port answers, ``/healthz?js-server-only``
  says so, and a retained message makes the round trip;
* after a node dies, the others re-elect the leaders of the streams it led:
  connects to them fail (NATS closes them after its 4 s JetStream API
  timeout) for a few seconds, then go through with the session intact.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from salvo.net.mqtt import Broker, connect_async, new_client
from salvo.tools.localbroker import free_port, server_binary

_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Node:
    name: str
    client: int
    http: int
    route: int
    mqtt: int


class NatsCluster:
    """``size`` nodes named n1..nN; ``start()`` returns once every node is
    ready. ``broker(order)`` is a Broker listing the nodes in that order."""

    def __init__(self, size: int = 3, workdir: Path | None = None) -> None:
        self.binary = server_binary("nats-server")
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="salvo-nats-"))
        self.nodes = self._ports(size)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @staticmethod
    def _ports(size: int) -> dict[int, Node]:
        return {i: Node(f"n{i}", free_port(), free_port(), free_port(), free_port()) for i in range(1, size + 1)}

    def config(self, i: int) -> str:
        node = self.nodes[i]
        routes = ", ".join(f"nats-route://{_HOST}:{n.route}" for j, n in self.nodes.items() if j != i)
        return "\n".join(
            [
                f"server_name: {node.name}",
                f"listen: {_HOST}:{node.client}",
                f"http: {_HOST}:{node.http}",
                f'jetstream {{ store_dir: "{self.dir / node.name}", max_memory_store: 256MB, max_file_store: 1GB }}',
                f"cluster {{ name: salvo, listen: {_HOST}:{node.route}, routes: [{routes}] }}",
                # Every node keeps a copy of the retained messages and sessions.
                f"mqtt {{ listen: {_HOST}:{node.mqtt}, stream_replicas: {min(3, len(self.nodes))} }}",
                "",
            ]
        )

    def log(self, i: int) -> Path:
        return self.dir / f"{self.nodes[i].name}.log"

    def start(self, timeout: float = 60.0) -> NatsCluster:
        for attempt in range(3):
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                for i in self.nodes:
                    self.start_node(i)
                self.wait_ready(timeout)
                return self
            except BaseException as exc:
                self.stop()  # no node left running (a port taken meanwhile, a node that exited)
                # A free port taken by another process between free_port() and
                # the bind (the default suite's workers start clusters and
                # brokers side by side): other ports will do, as for mosquitto.
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                self.nodes = self._ports(len(self.nodes))
        raise AssertionError("unreachable")

    def start_node(self, i: int) -> None:
        if self.running(i):
            return
        conf = self.dir / f"{self.nodes[i].name}.conf"
        conf.write_text(self.config(i))
        with self.log(i).open("ab") as log:
            self.procs[i] = subprocess.Popen(
                [self.binary, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def running(self, i: int) -> bool:
        proc = self.procs.get(i)
        return proc is not None and proc.poll() is None

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``: a machine lost, nothing said to anyone."""
        proc = self.procs.get(i)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        for i in list(self.procs):
            self.kill(i)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.stop()

    def broker(self, *order: int) -> Broker:
        """The cluster as a client lists it: the nodes in ``order`` (default n1, n2, ...)."""
        nodes = order or tuple(self.nodes)
        return Broker.from_url(",".join(f"mqtt://{_HOST}:{self.nodes[i].mqtt}" for i in nodes))

    # -- readiness -----------------------------------------------------------------------

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        pending = [i for i in self.nodes if self.running(i)]
        while pending:
            for i in list(pending):
                if not self.running(i):
                    raise RuntimeError(f"nats-server {self.nodes[i].name} exited: {self.log(i).read_text()[-2000:]}")
                if self._healthy(i) and self._round_trip(i):
                    pending.remove(i)
            if pending and time.monotonic() > end:
                raise RuntimeError(f"NATS nodes {pending} not ready in {timeout:g} s (logs in {self.dir})")
            time.sleep(0.1)

    def _healthy(self, i: int) -> bool:
        try:
            socket.create_connection((_HOST, self.nodes[i].mqtt), timeout=0.5).close()
            with urllib.request.urlopen(f"http://{_HOST}:{self.nodes[i].http}/jsz", timeout=2) as r:
                meta = json.loads(r.read()).get("meta_cluster") or {}
            return bool(meta.get("leader"))
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def _round_trip(self, i: int, timeout: float = 5.0) -> bool:
        """A retained message published on node ``i`` comes back from it."""
        import threading

        topic, payload = f"/salvo-ready/{self.nodes[i].name}", os.urandom(6).hex().encode()
        got = threading.Event()
        broker = Broker.from_url(f"mqtt://{_HOST}:{self.nodes[i].mqtt}?protocol=3")
        client = new_client(broker, f"salvo-ready-{self.nodes[i].name}-{os.getpid()}")
        client.on_connect = lambda c, *_a: c.subscribe(topic, 0)
        client.on_subscribe = lambda c, *_a: c.publish(topic, payload, qos=1, retain=True)
        client.on_message = lambda _c, _u, m: got.set() if m.payload == payload else None
        try:
            connect_async(client, broker)
            client.loop_start()
            return got.wait(timeout)
        finally:
            client.disconnect()
            client.loop_stop()
