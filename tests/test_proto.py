"""proto/salvo.proto: compiled with protoc, its canonical JSON mapping must be
the wire format of messages captured from a real game, field by field."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel

from salvo.sdk.bots import make_strategy
from salvo.sdk.client import SalvoClient
from salvo.spec import crypto, wire
from salvo.spec.errors import Code
from salvo.spec.topics import Topics, matches
from salvo.tools.conformance.harness import team_key

from mosquitto import Mosquitto
from mqttkit import Recorder

grpc_tools = pytest.importorskip("grpc_tools.protoc")
# (protobuf ships no type stubs here: its names are Any to mypy; "unused-ignore"
# for an environment where types-protobuf is installed)
from google.protobuf import json_format, struct_pb2  # type: ignore[import-untyped,unused-ignore]  # noqa: E402
from google.protobuf.message import Message  # type: ignore[import-untyped,unused-ignore]  # noqa: E402

#: the game id of a stale shot (its refusal carries a Shot)
NOBODYS = "f" * 16
PROTO = Path(__file__).resolve().parent.parent / "proto" / "salvo.proto"


@pytest.fixture(scope="module")
def pb(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    out = tmp_path_factory.mktemp("proto")
    import grpc_tools  # type: ignore[import-untyped,unused-ignore]

    include = Path(grpc_tools.__file__).parent / "_proto"
    rc = grpc_tools.protoc.main(["protoc", f"-I{PROTO.parent}", f"-I{include}", f"--python_out={out}", str(PROTO)])
    assert rc == 0, "protoc failed on proto/salvo.proto"
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("salvo_pb2")
    finally:
        sys.path.remove(str(out))


def to_dict(msg: Message) -> dict[str, Any]:
    result: dict[str, Any]
    try:
        result = json_format.MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except TypeError:  # protobuf < 5.26
        result = json_format.MessageToDict(msg, preserving_proto_field_name=True, including_default_value_fields=True)
    return result


def agree(payload: bytes | str, proto_cls: type[Message], model: type[BaseModel] | None) -> None:
    wire_json = json.loads(payload)
    msg = proto_cls()
    json_format.Parse(payload, msg)  # unknown fields are an error
    # the canonical mapping gives back the wire JSON (null <-> an unset optional field)
    assert to_dict(msg) == {k: v for k, v in wire_json.items() if v is not None}
    if model is None:
        return
    parsed = model.model_validate(wire_json)
    for name in type(parsed).model_fields:
        expected = getattr(parsed, name)
        field = msg.DESCRIPTOR.fields_by_name[name]
        if field.has_presence and not msg.HasField(name):
            assert expected is None, (name, expected)
            continue
        value = getattr(msg, name)
        if isinstance(value, Message):
            value = to_dict(value)
            expected = expected if isinstance(expected, dict) else dict(expected)
        elif field.enum_type is not None:
            value = field.enum_type.values_by_number[value].name
        assert value == expected, (proto_cls.__name__, name, value, expected)


def test_messages_of_a_real_game_parse_and_agree(
    pb: ModuleType, broker: Mosquitto, start_referee: Any, prefix: str
) -> None:
    start_referee(turn_timeout=10)
    t = Topics(prefix)
    watcher = Recorder(broker, "referee", [t.everything()])
    players = {"alice": "density", "bob": "random"}
    secrets = {name: f"{name}-proto-secret" for name in players}
    clients = [
        SalvoClient(n, secrets[n], broker.url(n), prefix=prefix, sealed=(n == "alice")).connect() for n in players
    ]
    threads = [threading.Thread(target=c.play, args=(make_strategy(players[c.name], 1),), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    # refused joins, for ErrorReport samples with and without a request_id
    watcher.publish(t.request_participation, '{"name": "a b", "secret": "x"}')
    watcher.publish(t.request_participation, '{"name": "a b", "secret": "x", "request_id": "r-1"}')
    # (v2.1) a fire refusal names its shot on its sender's own topic: bob's
    # key, another game's id (a public refusal names none: protocol.md 6)
    watcher.wait_for(t.state, "turn", timeout=30)
    stale = crypto.sign(
        team_key("bob", secrets["bob"]), {"x": 3, "y": 4, "target": "alice", "turn": 1, "game": NOBODYS}
    )
    watcher.publish(t.fire("alice"), json.dumps(stale))
    for thread in threads:
        thread.join(60)
    watcher.wait_for(t.state, "over", timeout=30)
    for c in clients:
        c.close()
    watcher.close()

    families: list[tuple[str, type[Message], type[BaseModel] | None]] = [
        (t.deadline, pb.Deadline, wire.Deadline),
        (t.turn, pb.TurnInfo, wire.TurnInfo),
        (t.salvo, pb.SalvoResult, wire.SalvoResult),
        (t.stats_summary, pb.StatsSummary, wire.StatsSummary),
        (f"{t.stats_summary.removesuffix('summary')}players/+", pb.PlayerStats, wire.PlayerStats),
        (t.hit("+"), pb.Hit, wire.Hit),
        (t.errors, pb.ErrorReport, wire.ErrorReport),
        (t.player_error("+"), pb.ErrorReport, wire.ErrorReport),
        (t.request_participation, pb.JoinRequest, wire.JoinRequest),
        (t.fire("+"), pb.SignedFire, None),
    ]
    seen: set[str] = set()
    game_ids = {m.text for m in watcher.messages if m.topic == t.game_id and m.payload}
    assert len(game_ids) == 1, game_ids
    for m in watcher.messages:
        if not m.payload:
            continue
        if m.topic == t.players_list:
            json_format.Parse(m.payload, struct_pb2.ListValue())
            seen.add("list")
        elif m.topic.endswith("/place"):
            owner = m.topic.split("/")[-4]
            plain = crypto.unseal(team_key(owner, secrets[owner]), m.payload, "placement", owner)
            agree(plain, pb.PlacementMessage, None)
            seen.add("PlacementMessage")
        for pattern, proto_cls, model in families:
            if matches(pattern, m.topic) and (m.topic != t.request_participation or m.payload.startswith(b"{")):
                agree(m.payload, proto_cls, model)
                if proto_cls is pb.SignedFire:  # and the signed data on its own
                    data = json.loads(m.payload)["data"]
                    agree(json.dumps(data), pb.FireData, wire.FireData)
                    assert data["game"] in {*game_ids, NOBODYS} and m.topic == t.fire(data["target"])
                    seen.add("FireData")
                if proto_cls is pb.ErrorReport and b"request_id" in m.payload:
                    seen.add("request_id")
                if proto_cls is pb.ErrorReport and b'"shot"' in m.payload:
                    seen.add("Shot")
                seen.add(proto_cls.__name__)
    names = {d.name for d in pb.DESCRIPTOR.message_types_by_name.values()}
    assert seen >= names | {"list", "request_id"}, f"never captured: {sorted(names | {'request_id'} - seen)}"


def test_the_proto_lists_exactly_the_error_codes(pb: ModuleType) -> None:
    values = {v.name for v in pb.Code.DESCRIPTOR.values if v.number}
    assert values == {code.value for code in Code}
    report = pb.ErrorReport()
    json_format.Parse('{"topic": "/game/errors", "error": "e", "code": "busy", "request_id": "r-1"}', report)
    assert report.code == pb.Code.Value("busy") and report.request_id == "r-1"
