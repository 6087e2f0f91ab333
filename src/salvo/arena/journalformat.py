"""The journal's formats: an accepted event as JSON (a row of the ``events``
table, a line of ``salvo journal export``) and a line of the spool, the
write-ahead file beside the state file (see :mod:`salvo.arena.journal`).

An event's JSON is a contract with every journal already written: a new
field needs a default here for the rows that do not have it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from salvo.game.events import (
    Abandon,
    Burn,
    CloseLobby,
    Config,
    Configure,
    Event,
    Extend,
    Fire,
    Join,
    Pause,
    Place,
    Resume,
    Tick,
)
from salvo.spec.codec import dumps
from salvo.spec.rules import Orientation, Placement

# -- events as JSON ---------------------------------------------------------------------


def event_to_json(ev: Event, *, redact_keys: bool = False) -> dict[str, Any]:
    if isinstance(ev, Fire):
        return {
            "type": "fire",
            "shooter": ev.shooter,
            "target": ev.target,
            "x": ev.x,
            "y": ev.y,
            "turn": ev.turn,
            "game": ev.game,
            "nonce": ev.nonce.hex() if ev.nonce is not None else None,
            "now": ev.now,
        }
    if isinstance(ev, Burn):
        return {
            "type": "burn",
            "player": ev.player,
            "nonce": ev.nonce.hex(),
            "code": ev.code,
            "now": ev.now,
            **({"topic": ev.topic, "reason": ev.reason} if ev.topic else {}),
            **({"signature": ev.signature} if ev.signature else {}),
            **({"shot": list(ev.shot)} if ev.shot is not None else {}),
        }
    if isinstance(ev, Extend):
        return {"type": "extend", "seconds": ev.seconds, "now": ev.now}
    if isinstance(ev, Tick):
        return {"type": "tick", "now": ev.now}
    if isinstance(ev, Place):
        p = ev.placement
        return {
            "type": "place",
            "name": ev.name,
            "ship": ev.ship,
            "x": p.x,
            "y": p.y,
            "orientation": p.orientation.value,
            "nonce": ev.nonce.hex() if ev.nonce is not None else None,
            "now": ev.now,
        }
    if isinstance(ev, Join):
        # Replays only compare keys for equality: an audit copy needs a digest, not the key.
        key = hashlib.sha256(ev.key).hexdigest() if redact_keys else ev.key.hex()
        return {"type": "join", "name": ev.name, "key": key, "redacted": redact_keys, "now": ev.now}
    if isinstance(ev, CloseLobby):
        return {"type": "close_lobby", "reason": ev.reason, "now": ev.now}
    if isinstance(ev, Abandon):
        told = {"tell": True} if ev.tell else {}  # (rows from before the organiser's abort have none)
        return {"type": "abandon", "reason": ev.reason, "now": ev.now, **told}
    if isinstance(ev, Pause):
        return {"type": "pause", "reason": ev.reason, "now": ev.now}
    if isinstance(ev, Resume):
        return {"type": "resume", "by": ev.by, "now": ev.now}
    return {"type": "configure", "config": asdict(ev.config), "now": ev.now}


def event_text(ev: Event) -> str:
    """``dumps(event_to_json(ev))``; a fire's spelled out, as there is one
    journaled per shot and the shot's hit waits for its spool line."""
    if type(ev) is not Fire:
        return dumps(event_to_json(ev))
    turn = "null" if ev.turn is None else str(ev.turn)
    game = "null" if ev.game is None else dumps(ev.game)
    nonce = "null" if ev.nonce is None else f'"{ev.nonce.hex()}"'
    return (
        f'{{"type":"fire","shooter":{dumps(ev.shooter)},"target":{dumps(ev.target)},"x":{ev.x},"y":{ev.y},'
        f'"turn":{turn},"game":{game},"nonce":{nonce},"now":{ev.now!r}}}'
    )


def event_from_json(d: dict[str, Any]) -> Event:
    kind = d["type"]
    if kind == "fire":
        nonce = bytes.fromhex(d["nonce"]) if d["nonce"] is not None else None
        # v1 journals named no shooter (it was the current player) and no game.
        return Fire(d.get("shooter", ""), d["target"], d["x"], d["y"], d["turn"], d.get("game"), nonce, d["now"])
    if kind == "burn":
        shot = d.get("shot")
        return Burn(
            d["player"],
            bytes.fromhex(d["nonce"]),
            d["now"],
            d.get("code", ""),
            d.get("topic", ""),
            d.get("reason", ""),
            d.get("signature", ""),
            (shot[0], shot[1], shot[2]) if shot else None,
        )
    if kind == "extend":
        return Extend(d["seconds"], d["now"])
    if kind == "tick":
        return Tick(d["now"])
    if kind == "place":
        nonce = bytes.fromhex(d["nonce"]) if d.get("nonce") else None
        placement = Placement(d["x"], d["y"], Orientation(d["orientation"]))
        return Place(d["name"], d["ship"], placement, d["now"], nonce)
    if kind == "join":
        return Join(d["name"], bytes.fromhex(d["key"]), d["now"])
    if kind == "close_lobby":
        return CloseLobby(d["reason"], d["now"])
    if kind == "abandon":
        return Abandon(d["reason"], d["now"], d.get("tell", False))
    if kind == "pause":
        return Pause(d["reason"], d["now"])
    if kind == "resume":
        return Resume(d["now"], d.get("by", ""))
    if kind == "configure":
        return Configure(Config(**d["config"]), d["now"])
    raise ValueError(f"unknown event type {kind!r}")


def config_to_json(config: Config) -> str:
    return json.dumps(asdict(config), sort_keys=True)


def config_from_json(text: str) -> Config:
    return Config(**json.loads(text))


# -- the spool -----------------------------------------------------------------------

#: An event on its way into SQLite: (id, arena, game, journal text, nonce, starts its game).
Row = tuple[int, str, int, str, "bytes | None", bool]


def spool_line(row: Row, arena_json: str) -> str:
    """One spool line: id, arena (JSON), game, nonce (hex or -), event (JSON), tab-separated."""
    nonce = row[4].hex() if row[4] is not None else "-"
    return f"{row[0]}\t{arena_json}\t{row[2]}\t{nonce}\t{row[3]}\n"


def parse_spool_line(line: bytes) -> tuple[int, str, int, str, bytes | None]:
    """The inverse of :func:`spool_line`; ValueError when the line is damaged."""
    id_, arena, game, nonce, text = line.decode("utf-8").split("\t", 4)
    name = json.loads(arena)
    if not isinstance(name, str) or not isinstance(json.loads(text), dict):
        raise ValueError("not a spool line")
    return int(id_), name, int(game), text, None if nonce == "-" else bytes.fromhex(nonce)
