"""The protocol of docs/protocol.md as an AsyncAPI 3.0 document: every topic a
channel, every payload a JSON Schema generated from :mod:`salvo.spec.wire`'s
models, the error codes from :class:`~salvo.spec.errors.Code`.

``salvo spec asyncapi`` prints it; docs/asyncapi.yaml is its output, and
tests/test_asyncapi.py fails when the two differ, when a topic family of
:mod:`salvo.spec.topics` has no channel here, or when the referee publishes
anything in a real game that the document does not allow.

The document is written from a team's point of view: ``send`` is what a
team publishes, ``receive`` what it reads. Topic addresses come from
:class:`~salvo.spec.topics.Topics` with ``{name}``-style levels.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from salvo.spec import codec, crypto, payloads, wire
from salvo.spec.errors import Code
from salvo.spec.rules import SHIP_IDS, Orientation, Placement
from salvo.spec.topics import NAME_RE, Inbound, Outbound, Topics, TournamentTopics

ASYNCAPI_VERSION: Final = "3.0.0"
MQTT_BINDING: Final = "0.2.0"

_REF = "#/components/schemas/{model}"


def _pointer(*levels: str) -> dict[str, str]:
    """A ``$ref`` to ``#/levels...`` of this document."""
    return {"$ref": "/".join(("#", *levels))}


#: The wire models a payload names, by component name.
_MODELS: Final[tuple[type[BaseModel], ...]] = (
    wire.JoinRequest,
    wire.PlacementMessage,
    wire.FireData,
    wire.Deadline,
    wire.TurnInfo,
    wire.SalvoResult,
    wire.Hit,
    wire.ErrorReport,
    wire.StatsSummary,
    wire.PlayerStats,
    wire.GameRecord,
)

#: Shared scalar schemas, named components (code generators name their types after them).
_SCALARS: Final[dict[str, dict[str, Any]]] = {
    "TeamName": {"type": "string", "pattern": f"^{NAME_RE.pattern}$", "description": "A team name"},
    "Base64": {
        "type": "string",
        "contentEncoding": "base64",
        "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        "description": "Standard base64 with padding",
    },
    "GameId": {"type": "string", "pattern": "^[0-9a-f]{16}$", "description": "A game's id, 16 lower-case hex digits"},
}
_NAME: Final = {"$ref": _REF.format(model="TeamName")}
_BASE64: Final = {"$ref": _REF.format(model="Base64")}
_GAME_ID: Final = {"$ref": _REF.format(model="GameId")}
_TRUE: Final = {"type": "boolean", "const": True}


def _schemas() -> dict[str, Any]:
    """Every payload's schema: the wire models' (pydantic), and the few
    payloads no model describes (plain text, base64, the referee's lease,
    the tournament's JSON, which the director spells)."""
    _, top = models_json_schema([(m, "validation") for m in _MODELS], ref_template=_REF)
    schemas: dict[str, Any] = {**top["$defs"], **_SCALARS}
    schemas["Code"] = {
        "type": "string",
        "enum": [c.value for c in Code],
        "title": "Code",
        "description": "Every error code (docs/protocol.md section 8): branch on it, never on `error`'s prose",
    }
    schemas["ErrorReport"]["properties"]["code"] = {"$ref": _REF.format(model="Code")}
    fire = wire.SignedMessage.model_json_schema(ref_template=_REF)
    fire["properties"] = {"data": {"$ref": _REF.format(model="FireData")}, "signature": _BASE64}
    fire.pop("$defs", None)  # (only the JsonValue of the generic `data`)
    fire["title"] = "FireMessage"
    fire["description"] = (
        "A signed message whose data is FireData; `signature` is seal(team key, JSON of `data`). "
        "(The referee also takes `payload` instead of `data`.)"
    )
    schemas["FireMessage"] = fire
    schemas["Lease"] = {
        "title": "Lease",
        "description": "Which referee process holds the arena (the referee's own; teams cannot read it)",
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "since": {"type": "number"},
            "host": {"type": "string"},
            "role": {"type": "string", "enum": ["free-play", "tournament"]},
            "gen": {"type": "integer"},
            "run": {"type": "string"},
        },
        "required": ["id", "since", "host"],
    }
    schemas["Assignment"] = {
        "title": "Assignment",
        "description": "Where a team plays next (docs/protocol.md section 5, tournament nights)",
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "round": {"type": "integer"},
                    "arena": _NAME,
                    "opponents": {"type": "array", "items": _NAME},
                    "opponent": _NAME,
                },
                "required": ["id", "round", "arena", "opponents"],
            },
            {"type": "object", "properties": {"waiting": {"type": "string"}}, "required": ["waiting"]},
            {
                "type": "object",
                "properties": {
                    "done": {"const": True},
                    "withdrawn": {"const": True},
                    "refused": {"type": "string"},
                },
                "required": ["done"],
            },
        ],
    }
    schemas["Standings"] = {
        "title": "Standings",
        "type": "object",
        "properties": {
            "format": {"type": "string"},
            "table_size": {"type": "integer"},
            "rounds": {"type": "integer"},
            "games_played": {"type": "integer"},
            "paused": {"type": "boolean"},
            "done": {"type": "boolean"},
            "table": {"type": "array", "items": {"type": "object", "properties": {"team": _NAME}}},
        },
        "required": ["table"],
    }
    schemas["Schedule"] = {
        "title": "Schedule",
        "type": "object",
        "properties": {
            "round": {"type": "integer"},
            "games": {"type": "array", "items": {"type": "array", "items": _NAME}},
            "fixtures": {"type": "array", "items": {"type": "object"}},
        },
    }
    for schema in schemas.values():
        _tidy(schema)
    return dict(sorted(schemas.items()))


_SPHINX_ROLE: Final = re.compile(r":\w+:`~?(?:\w+\.)*(\w+)`")


def _tidy(schema: dict[str, Any]) -> None:
    """What pydantic writes for Python, made to say what the wire carries:
    an optional key the referee leaves out when it has no value (``X | None
    = None``) is the bare ``X`` (it is never ``null``: the game test would
    fail on one), and docstrings lose their Sphinx markup."""
    if "description" in schema:
        schema["description"] = _SPHINX_ROLE.sub(r"`\1`", schema["description"]).replace("``", "`")
    required = set(schema.get("required", ()))
    for key, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf", [])
        if key not in required and prop.get("default", 0) is None and len(options) == 2 and {"type": "null"} in options:
            (kept,) = (o for o in options if o != {"type": "null"})
            del prop["anyOf"], prop["default"]
            prop.update(kept)


@dataclass(frozen=True, slots=True)
class _Message:
    summary: str
    schema: dict[str, Any]
    text: bool = False  # text/plain: the scalar's text (an integer or boolean schema: its JSON spelling)


def _model(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(model=name)}


_MESSAGES: Final[dict[str, _Message]] = {
    "cleared": _Message(
        "Cleared: an empty retained payload (the topic has no value now; a draw's /game/winner too)",
        {"type": "string", "maxLength": 0},
        text=True,
    ),
    "server": _Message("up; the referee's last will sets down", {"type": "string", "enum": ["up", "down"]}, True),
    "pubkey": _Message("The referee's X25519 public key, for sealed joins", _BASE64, True),
    "lease": _Message("The arena's lease", _model("Lease")),
    "sweep": _Message("A random marker of the referee's start-up sweep: ignore it", {"type": "string"}, True),
    "probe": _Message("The referee's own probe through the broker", {"type": "string"}, True),
    "version": _Message(
        "(v2.1) The protocol version the referee speaks",
        {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$"},
        True,
    ),
    "gameId": _Message("The current game's id, 16 lower-case hex digits; every fire message signs it", _GAME_ID, True),
    "state": _Message("The phase", {"type": "string", "enum": ["lobby", "turn", "over"]}, True),
    "deadline": _Message("When the current phase times out (unix seconds)", _model("Deadline")),
    "joinPlain": _Message("A join in the clear", _model("JoinRequest")),
    "joinSealed": _Message("A sealed join: crypto_box_seal of the JoinRequest JSON to /game/pubkey", _BASE64, True),
    "playersList": _Message("The players, in join order", {"type": "array", "items": _NAME}),
    "playersCount": _Message("How many joined", {"type": "integer", "minimum": 0}, True),
    "place": _Message("seal(team key, PlacementMessage JSON): nonce(24) || secretbox, base64", _BASE64, True),
    "approved": _Message("true once the ship is placed; false at the join", {"type": "boolean"}, True),
    "errorReport": _Message("A refused message (or the referee's own word)", _model("ErrorReport")),
    "turn": _Message("The turn being played", _model("TurnInfo")),
    "current": _Message("The current player", _NAME, True),
    "fire": _Message("A signed, bound shot (only the referee reads it)", _model("FireMessage")),
    "hit": _Message("An accepted shot at you, hit or miss", _model("Hit")),
    "hits": _Message("The hits of the salvo that just ended", {"type": "integer", "minimum": 0}, True),
    "salvo": _Message("The result of the salvo that just ended", _model("SalvoResult")),
    "sunk": _Message("The ship is sunk", _TRUE, True),
    "defeated": _Message("The player is defeated", _TRUE, True),
    "winner": _Message("The winner", _NAME, True),
    "statsSummary": _Message("The game's summary", _model("StatsSummary")),
    "record": _Message("The whole game, fleets included, once it is over", _model("GameRecord")),
    "playerStats": _Message("A player's stats", _model("PlayerStats")),
    "assignment": _Message("Where the team plays next", _model("Assignment")),
    "standings": _Message("The tournament's table", _model("Standings")),
    "schedule": _Message("The tournament's rounds", _model("Schedule")),
    "marker": _Message("The director's own marker: ignore it", {"type": "string"}, True),
}


def _examples() -> dict[str, list[str]]:
    """Example payloads as the wire carries them, built by the functions the
    referee and the SDK build theirs with (the AsyncAPI parser checks each
    against its schema). The signed and sealed ones are docs/protocol.md
    section 3's worked example: its fixed nonces are for the example only."""
    key = crypto.derive_team_key("alice", "correct horse battery staple")
    game, alice = "f4f2e80d6f85efdc", payloads.quote("alice")
    fire = crypto.sign(key, payloads.fire_data(3, 4, "bob", 1, game), nonce=bytes(range(24, 48)))
    place = payloads.placement(Placement(3, 4, Orientation.HORIZONTAL))
    return {
        "cleared": [""],
        "server": ["up", "down"],
        "version": [payloads.PROTOCOL_VERSION],
        "gameId": [game],
        "state": ["lobby", "turn", "over"],
        "deadline": [payloads.deadline("placement", 1795313419.518), payloads.paused_deadline("turn", 1795313450, 12)],
        "joinPlain": [payloads.join_request("alice", "correct horse battery staple", "5b0e3c1f9a7d4e26", game)],
        "playersList": [payloads.names(["alice", "bob", "carol"])],
        "playersCount": [payloads.count(3)],
        "place": [crypto.seal(key, place, nonce=bytes(range(24)))],
        "approved": [payloads.TRUE, payloads.FALSE],
        "errorReport": [
            codec.error_report(
                _T.request_participation,
                "name taken: 'bob' already joined with another secret",
                Code.NAME_TAKEN,
                "5b0e3c1f9a7d4e26",
            ),
            codec.error_report(
                _T.fire("alice"),
                "not your turn: it is alice's",
                Code.NOT_CURRENT_PLAYER,
                signature=fire["signature"][:16],
                shot=("alice", 3, 4),
            ),
        ],
        "turn": [payloads.turn(1, alice, 5)],
        "current": ["alice"],
        "fire": [json.dumps(fire, separators=(",", ":"))],
        "hit": [payloads.hit("", 43, 1, 1, payloads.hit_end(game)).payload],
        "hits": [payloads.count(2)],
        "salvo": [payloads.salvo(1, alice, 5, 2)],
        "sunk": [payloads.TRUE],
        "defeated": [payloads.TRUE],
        "winner": ["carol"],
        "statsSummary": [payloads.stats_summary("carol", 17, 68, 41, 12.73, "victory")],
        "playerStats": [payloads.player_stats(2, 21, 12, 2, 5, 17, "sunk")],
    }


@dataclass(frozen=True, slots=True)
class _Channel:
    id: str
    address: str
    description: str
    messages: tuple[str, ...]
    #: the team's operation: it publishes (send), reads (receive), or neither (the referee's own)
    op: Literal["send", "receive"] | None
    retained: bool = False
    qos: int = 1


_T = Topics()
_N, _S, _TG, _TEAM = "{name}", "{ship}", "{target}", "{team}"
_PRIVATE = " Only the team itself (and the referee) may read it."

#: Every channel, with the topic family of salvo.spec.topics it stands for.
_CHANNELS: Final[tuple[tuple[Outbound | Inbound | None, _Channel], ...]] = (
    (Outbound.SERVER, _Channel("gameServer", _T.server, "Is the referee up?", ("server",), "receive", True)),
    (Outbound.PUBKEY, _Channel("gamePubkey", _T.pubkey, "The referee's key for sealed joins; survives restarts.",
                               ("pubkey",), "receive", True)),
    (Outbound.VERSION, _Channel("gameVersion", _T.version, "(v2.1) The protocol version, published with the "
                                "pubkey whenever the referee (re)connects; absent from a v2 referee.",
                                ("version",), "receive", True)),
    (Outbound.LEASE, _Channel("gameLease", _T.lease, "The referee's own: which referee process holds the arena. "
                              "Teams cannot read it.", ("lease",), None, True)),
    (Outbound.SWEEP, _Channel("gameSweep", _T.sweep, "The referee's own start-up marker (QoS 0, not retained). "
                              "Teams cannot read it.", ("sweep",), None, False, 0)),
    (None, _Channel("refereeProbe", _T.probe, "The referee's own probe of the broker's lag. Teams cannot read it.",
                    ("probe",), None)),
    (Outbound.GAME_ID, _Channel("gameId", _T.game_id, "The current game's id, new for every game.",
                                ("gameId",), "receive", True)),
    (Outbound.STATE, _Channel("gameState", _T.state, "The game's phase.", ("state",), "receive", True)),
    (Outbound.DEADLINE, _Channel("gameDeadline", _T.deadline, "When the current phase times out.",
                                 ("deadline",), "receive", True)),
    (Inbound.JOIN, _Channel("requestParticipation", _T.request_participation,
                            "Join the lobby: plain JSON, or (better) a sealed request. Only the referee reads it.",
                            ("joinPlain", "joinSealed"), "send")),
    (Outbound.PLAYERS_LIST, _Channel("playersList", _T.players_list, "Who joined.", ("playersList",), "receive", True)),
    (Outbound.PLAYERS_COUNT, _Channel("playersCount", _T.players_count, "How many joined.", ("playersCount",),
                                      "receive", True)),
    (Inbound.PLACE, _Channel("shipPlace", _T.place(_N, _S), "Place one of your ships (sealed with your team key). "
                             "Only your own.", ("place",), "send")),
    (Outbound.APPROVED, _Channel("shipApproved", _T.approved(_N, _S), "Your ship's placement." + _PRIVATE,
                                 ("approved",), "receive", True)),
    (Outbound.SHIP_ERROR, _Channel("shipError", _T.ship_error(_N, _S), "A refused placement." + _PRIVATE,
                                   ("errorReport",), "receive")),
    (Outbound.TURN, _Channel("gameTurn", _T.turn, "The turn being played.", ("turn",), "receive", True)),
    (Outbound.CURRENT, _Channel("gameCurrent", _T.current, "Whose turn it is.", ("current",), "receive", True)),
    (Inbound.FIRE, _Channel("fire", _T.fire(_TG), "Fire at a target: a signed message bound to the target, the "
                            "turn and the game. Only the referee reads it.", ("fire",), "send")),
    (Outbound.HIT, _Channel("hit", _T.hit(_TG), "Every accepted shot at the target, hit or miss. Only the target "
                            "(and the referee) may read it.", ("hit",), "receive")),
    (Outbound.HITS, _Channel("gameHits", _T.hits, "The hits of the salvo that just ended.", ("hits",), "receive")),
    (Outbound.SALVO, _Channel("gameSalvo", _T.salvo, "The salvo that just ended.", ("salvo",), "receive", True)),
    (Outbound.SUNK, _Channel("shipSunk", _T.sunk(_N, _S), "A sunk ship.", ("sunk",), "receive", True)),
    (Outbound.DEFEATED, _Channel("playerDefeated", _T.defeated(_N), "A defeated player.", ("defeated",),
                                 "receive", True)),
    (Outbound.PLAYER_ERROR, _Channel("playerError", _T.player_error(_N), "Your refused fire messages, and what the "
                                     "referee tells you on its own." + _PRIVATE, ("errorReport",), "receive")),
    (Outbound.ERRORS, _Channel("gameErrors", _T.errors, "Every join refusal and whatever cannot be attributed; "
                               "public.", ("errorReport",), "receive")),
    (Outbound.WINNER, _Channel("gameWinner", _T.winner, "The winner (cleared on a draw).", ("winner",),
                               "receive", True)),
    (Outbound.STATS_SUMMARY, _Channel("statsSummary", _T.stats_summary, "The game's summary.", ("statsSummary",),
                                      "receive", True)),
    (Outbound.RECORD, _Channel("gameRecord", _T.record, "The whole game, once it is over.", ("record",),
                               "receive", True)),
    (Outbound.STATS_PLAYER, _Channel("statsPlayer", _T.stats_player(_N), "A player's stats.", ("playerStats",),
                                     "receive", True)),
    (None, _Channel("tournamentAssignment", TournamentTopics.assignments().replace("+", _TEAM),
                    "(tournament) Where the team plays next; outside every arena.", ("assignment",), "receive", True)),
    (None, _Channel("tournamentStandings", TournamentTopics.standings, "(tournament) The table.", ("standings",),
                    "receive", True)),
    (None, _Channel("tournamentSchedule", TournamentTopics.schedule, "(tournament) The rounds.", ("schedule",),
                    "receive", True)),
    (None, _Channel("tournamentMarker", TournamentTopics.marker, "(tournament) The director's own marker.",
                    ("marker",), None)),
)  # fmt: skip

_PARAMETERS: Final = {
    "name": "A team name: 1-32 characters of [A-Za-z0-9_-], not `players` (your login)",
    "target": "The team name of the player fired at (any player not yet defeated, yourself included)",
    "ship": "A ship id: " + ", ".join(SHIP_IDS) + " (a placement for another level is refused `unknown_ship`)",
    "team": "A team name",
}

_INFO = """\
Battleship: Salvo over MQTT, the protocol of docs/protocol.md, generated
from salvo's wire models (`salvo spec asyncapi`).

Point of view: a team's client. `send` operations are what a team
publishes (QoS 1, never retained); `receive` operations are what it reads.
The referee publishes everything at QoS 1 (but /game/sweep); each receive
operation's MQTT binding says whether the topic is retained. Channels
without operations are the referee's (or the director's) own.

Payloads: `application/json` is compact UTF-8 JSON; `text/plain` is the
scalar's text (an integer or boolean schema is its JSON spelling: `3`,
`true`). A retained topic may be cleared: an empty retained payload (the
`cleared` message of each retained channel).

Arenas: with an arena prefix P every address moves under it
(`/P/game/state`); tournament topics never do.

Security: at the venue, MQTT over TLS on port 8883 (server `venue`): verify
the broker's certificate against the organiser's CA (`ca.crt`, handed out
with the team card, whose SHA-256 fingerprint the card prints; never turn
host-name verification off), and log in with the team name and its MQTT
password. The plain listener (server `organiser`) is for the organiser's
own tools only.
"""


def _decoded(message: _Message, text: str) -> Any:
    """A payload's text as the JSON value its schema describes."""
    if message.text and message.schema.get("type") not in ("integer", "boolean"):
        return text
    return json.loads(text)


def document() -> dict[str, Any]:
    """The AsyncAPI 3.0 document, as plain JSON values."""
    covered = {kind for kind, _ in _CHANNELS if kind is not None}
    if missing := (set(Outbound) | set(Inbound)) - covered:
        raise LookupError(f"topic families without an AsyncAPI channel: {sorted(k.name for k in missing)}")
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for _, ch in _CHANNELS:
        names = (*ch.messages, "cleared") if ch.retained else ch.messages
        channel: dict[str, Any] = {
            "address": ch.address,
            "description": ch.description + (" Retained." if ch.retained else ""),
            "messages": {m: _pointer("components", "messages", m) for m in names},
        }
        if params := re.findall(r"\{(\w+)\}", ch.address):
            channel["parameters"] = {p: _pointer("components", "parameters", p) for p in params}
        channels[ch.id] = channel
        if ch.op is not None:
            operations[f"{ch.op}{ch.id[0].upper()}{ch.id[1:]}"] = {
                "action": ch.op,
                "channel": _pointer("channels", ch.id),
                "messages": [_pointer("channels", ch.id, "messages", m) for m in names],
                "bindings": {"mqtt": {"qos": ch.qos, "retain": ch.retained, "bindingVersion": MQTT_BINDING}},
            }
    examples = _examples()
    messages: dict[str, Any] = {}
    for name, m in _MESSAGES.items():
        message: dict[str, Any] = {
            "name": name,
            "summary": m.summary,
            "contentType": "text/plain" if m.text else "application/json",
            "payload": m.schema,
        }
        if name in examples:
            message["examples"] = [{"payload": _decoded(m, text)} for text in examples[name]]
        messages[name] = message
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "salvo: Battleship Salvo over MQTT",
            "version": payloads.PROTOCOL_VERSION,
            "description": _INFO.strip(),
            "license": {"name": "MIT"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "venue": {
                "host": "{host}:8883",
                "protocol": "secure-mqtt",
                "description": "The venue's TLS listener: verify it against the organiser's ca.crt.",
                "variables": {"host": {"description": "The broker's host name, from the team card"}},
                "security": [_pointer("components", "securitySchemes", "teamLogin")],
            },
            "organiser": {
                "host": "localhost:1883",
                "protocol": "mqtt",
                "description": "The plain listener: the organiser's own tools (loopback, the compose network).",
            },
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": _schemas(),
            "messages": messages,
            "parameters": {p: {"description": d} for p, d in _PARAMETERS.items()},
            "securitySchemes": {
                "teamLogin": {
                    "type": "userPassword",
                    "description": "Username: the team name; password: the MQTT password of the team card. "
                    "Over TLS only, verified against the organiser's CA (ca.crt).",
                }
            },
        },
    }


# -- text ---------------------------------------------------------------------------

_PLAIN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_YAML_WORDS: Final = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n"})


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS
        return value if plain else json.dumps(value)  # a JSON string is a YAML double-quoted scalar
    return json.dumps(value)  # numbers, booleans, null


def _yaml(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    heads = [f"{_scalar(k)}:" for k in value] if isinstance(value, dict) else ["-"] * len(value)
    items = zip(heads, value.values() if isinstance(value, dict) else value, strict=True)
    lines: list[str] = []
    for head, v in items:
        if isinstance(v, (dict, list)) and v:
            lines.append(pad + head)
            lines.extend(_yaml(v, indent + 2))
        elif isinstance(v, str) and "\n" in v and not v.endswith("\n") and _block_safe(v):
            lines.append(f"{pad}{head} |-")
            lines.extend(f"{pad}  {line}" if line else "" for line in v.split("\n"))
        else:
            lines.append(f"{pad}{head} {'{}' if v == {} else '[]' if v == [] else _scalar(v)}")
    return lines


def _block_safe(text: str) -> bool:
    lines = text.split("\n")
    return not text[0].isspace() and all(line == line.rstrip() and "\t" not in line for line in lines)


def render(fmt: Literal["yaml", "json"] = "yaml") -> str:
    """The document as YAML (what docs/asyncapi.yaml holds) or JSON."""
    doc = document()
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    header = "# Generated by `salvo spec asyncapi` from salvo's wire models: do not edit by hand.\n"
    return header + "\n".join(_yaml(doc, 0)) + "\n"
