"""Scripted teams for the conformance suite (and our own tests).

Only the protocol library is used here (topics, crypto, and the neutral
watcher of :mod:`salvo.net.watch`): never the referee's engine, protocol layer
or adapter, so the suite judges any referee by what it publishes.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from salvo.net.watch import NoReply, Recorder
from salvo.spec import crypto
from salvo.spec.rules import Placement
from salvo.spec.topics import Topics

__all__ = ["Team", "fire_data", "team_key"]


@functools.lru_cache(maxsize=256)
def team_key(name: str, secret: str) -> bytes:
    return crypto.derive_team_key(name, secret)


class Team:
    """A scripted team: joins, places and fires through its own connection
    (its login) with nothing but the crypto module. What it reads is what
    ``conn`` subscribes to: :meth:`current` (and so :meth:`game_id` and
    :meth:`fire` without a game) needs the public topics there."""

    def __init__(self, conn: Recorder, topics: Topics, name: str, secret: str) -> None:
        self.conn, self.t, self.name, self.secret = conn, topics, name, secret

    @property
    def key(self) -> bytes:
        return team_key(self.name, self.secret)

    def current(self, topic: str, timeout: float = 10.0) -> str:
        """The latest non-empty payload on ``topic``, waiting for one (a
        cleared retained topic is empty until published again)."""
        self.conn.wait_until(lambda: bool(self.conn.text(topic)), timeout)
        text = self.conn.text(topic)
        if not text:
            raise NoReply(f"nothing on {topic} within {timeout:g}s")
        return text

    def game_id(self) -> str:
        """The current game's id: the latest /game/id."""
        return self.current(self.t.game_id)

    def join(self, pubkey: str | None = None, request_id: str | None = None) -> None:
        """A join request: plain, or sealed to ``pubkey`` (the referee's)."""
        body: dict[str, str] = {"name": self.name, "secret": self.secret}
        if request_id is not None:
            body["request_id"] = request_id
        request = json.dumps(body)
        if pubkey is not None:
            request = crypto.seal_to(pubkey, request)
        self.conn.publish(self.t.request_participation, request)

    def place_raw(self, ship: str, body: str, key: bytes | None = None) -> None:
        self.conn.publish(self.t.place(self.name, ship), crypto.seal(key or self.key, body))

    def place(self, ship: str, p: Placement) -> None:
        self.place_raw(ship, json.dumps({"coordinates": f"{p.x};{p.y}", "orientation": p.orientation.value}))

    def place_fleet(self, fleet: dict[str, Placement]) -> None:
        for ship, p in fleet.items():
            self.place(ship, p)

    def signed(self, data: Any) -> str:
        return json.dumps(crypto.sign(self.key, data))

    def fire(self, target: str, x: int, y: int, turn: int, game: str | None = None) -> str:
        """A bound (v2) shot: signed for its target, turn and game (default:
        the current /game/id); the message as sent."""
        message = self.signed(fire_data(target, x, y, turn, game or self.game_id()))
        self.conn.publish(self.t.fire(target), message)
        return message


def fire_data(target: str, x: int, y: int, turn: int, game: str) -> dict[str, Any]:
    """The signed data of a v2 fire message."""
    return {"x": x, "y": y, "target": target, "turn": turn, "game": game}
