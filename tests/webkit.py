"""Test glue for attacks on the web server: an event-stream reader over a
plain connection, and connections from chosen source addresses (the whole
of 127.0.0.0/8 is this machine: a test that narrows ``loopback`` to
127.0.0.1 has the others stand in for the venue's laptops)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from typing import Any

Event = tuple[str, Any]  # (event type, decoded JSON data)


def venue(n: int) -> str:
    """The ``n``-th stand-in venue address (127.0.0.2, 127.0.0.3, ...)."""
    return f"127.0.0.{2 + n}"


def connect(port: int, source: str = "127.0.0.1", timeout: float = 10) -> socket.socket:
    """A TCP connection to this machine's ``port`` from ``source``."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


class SSE:
    """``GET /events`` on ``port``, read one server-sent event at a time."""

    def __init__(self, port: int, path: str = "/events", timeout: float = 10) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", path)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.status
        assert self.resp.headers["Content-Type"].startswith("text/event-stream")

    def next(self) -> Event:
        kind, data = "message", list[str]()
        while True:
            line = self.resp.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\n")
            if not text:
                if data:
                    return kind, json.loads("\n".join(data))
                kind = "message"
            elif not text.startswith(":"):
                name, _, value = text.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    kind = value
                elif name == "data":
                    data.append(value)

    def until(self, pred: Callable[[Event], bool], timeout: float = 10) -> list[Event]:
        """Every event up to and including the first one ``pred`` accepts."""
        seen: list[Event] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            seen.append(self.next())
            if pred(seen[-1]):
                return seen
        raise AssertionError(f"nothing expected within {timeout}s; saw {seen[-20:]}")

    def close(self) -> None:
        self.conn.close()


def on(topic: str, payload: str | None = None) -> Callable[[Event], bool]:
    return lambda e: e[0] == "message" and e[1]["topic"] == topic and payload in (None, e[1]["payload"])
