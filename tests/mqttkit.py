"""MQTT helpers for integration tests: a recording client and a scripted team
that speaks the protocol with nothing but paho and the crypto module."""

from __future__ import annotations

import json
from typing import Any

from salvo import crypto
from salvo.conformance.harness import Msg, team_key, wait_until
from salvo.conformance.harness import Recorder as _Recorder
from salvo.mqtt import Broker
from salvo.rules import Placement
from salvo.topics import Topics

from mosquitto import Mosquitto

__all__ = ["Msg", "Recorder", "Team", "wait_until"]


class Recorder(_Recorder):
    """The conformance harness's recorder, logged in as a test-broker user."""

    def __init__(self, broker: Mosquitto, user: str | None, filters: list[str] | tuple[str, ...]) -> None:
        super().__init__(Broker.from_url(broker.url(user)), filters, label="test")


class Team:
    """A scripted team: joins, places, fires; records its private and the
    public topics. Logs in with its name when the broker knows it, else as a
    plain team user that the ACL lets join and fire (never place)."""

    def __init__(
        self, broker: Mosquitto, prefix: str, name: str, secret: str | None = None, login: str | None = None
    ) -> None:
        self.name = name
        self.secret = secret or f"{name}-secret-for-tests"
        self.t = Topics(prefix)
        user = login or (name if name in broker.users else "referee")
        self.rec = Recorder(broker, user, [self.t.private_filter(name), *self.t.public_filters])

    @property
    def key(self) -> bytes:
        return team_key(self.name, self.secret)

    def join(self, sealed: bool = False, request_id: str | None = None) -> None:
        body = {"name": self.name, "secret": self.secret}
        if request_id is not None:
            body["request_id"] = request_id
        request = json.dumps(body)
        if sealed:
            pubkey = self.rec.wait_for(self.t.pubkey).text
            request = crypto.seal_to(pubkey, request)
        self.rec.publish(self.t.request_participation, request)

    def place(self, ship: str, placement: Placement) -> None:
        body = {"coordinates": f"{placement.x};{placement.y}", "orientation": placement.orientation.value}
        self.rec.publish(self.t.place(self.name, ship), crypto.seal(self.key, json.dumps(body)))

    def place_fleet(self, fleet: dict[str, Placement]) -> None:
        for ship, placement in fleet.items():
            self.place(ship, placement)

    def game_id(self) -> str:
        """The latest /game/id seen (retained, public)."""

        def latest() -> str:
            msg = self.rec.latest(self.t.game_id)
            return msg.text if msg is not None else ""

        self.rec.wait_until(lambda: bool(latest()), 10)
        return latest()

    def turn(self) -> int:
        """The current turn, from the retained /game/turn."""
        return int(self.rec.wait(lambda m: m.topic == self.t.turn and bool(m.payload)).json()["turn"])

    def fire(self, target: str, x: int, y: int, turn: int, game: str | None = None, **data: Any) -> dict[str, Any]:
        """A v2 shot signed for its target, ``turn`` and ``game`` (default:
        the current id); ``data`` adds or overrides fields of the signed data."""
        body: dict[str, Any] = {"x": x, "y": y, "target": target, "turn": turn, "game": game or self.game_id()}
        message = crypto.sign(self.key, {**body, **data})
        self.rec.publish(self.t.fire(target), json.dumps(message))
        return message

    def close(self) -> None:
        self.rec.close()
