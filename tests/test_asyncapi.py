"""The AsyncAPI document (docs/asyncapi.yaml): it is what `salvo spec asyncapi`
generates, the AsyncAPI parser accepts it, and every message of a real game
through the real referee and mosquitto validates against its channel's
schema. Regenerate it with: salvo spec asyncapi > docs/asyncapi.yaml"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # types-jsonschema is no test dependency
import pytest
import yaml  # type: ignore[import-untyped]  # types-PyYAML is no test dependency
from click.testing import CliRunner

from salvo.cli import main
from salvo.sdk.bots import make_strategy
from salvo.sdk.client import SalvoClient
from salvo.spec import asyncapi, crypto, payloads
from salvo.spec.errors import Code
from salvo.spec.topics import Inbound, Topics

from conftest import RefereeFactory
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "docs" / "asyncapi.yaml"
NODE_PROJECT = ROOT / "tools" / "asyncapi"
#: The document, generated once for the tests that only read it.
DOC = cache(asyncapi.document)


def test_the_shipped_document_is_what_the_code_generates() -> None:
    assert SHIPPED.read_text() == asyncapi.render("yaml"), (
        "docs/asyncapi.yaml is stale: regenerate it with `salvo spec asyncapi > docs/asyncapi.yaml`"
    )


def test_the_cli_prints_one_document_as_yaml_and_as_json() -> None:
    as_yaml = CliRunner().invoke(main, ["spec", "asyncapi"])
    as_json = CliRunner().invoke(main, ["spec", "asyncapi", "--format", "json"])
    assert as_yaml.exit_code == 0 and as_json.exit_code == 0, as_yaml.output + as_json.output
    assert as_yaml.output == SHIPPED.read_text()
    assert yaml.safe_load(as_yaml.output) == json.loads(as_json.output) == json.loads(json.dumps(asyncapi.document()))


def test_the_error_codes_and_the_topic_families_come_from_the_spec() -> None:
    doc = DOC()
    assert doc["components"]["schemas"]["Code"]["enum"] == [c.value for c in Code]
    # every inbound family is a send channel, and its address parses back to that family
    t = Topics()
    sends = {
        doc["channels"][op["channel"]["$ref"].rsplit("/", 1)[1]]["address"]
        for op in doc["operations"].values()
        if op["action"] == "send"
    }
    kinds = {(r.kind if (r := t.parse_inbound(a.replace("{", "").replace("}", ""))) else None) for a in sends}
    assert kinds == set(Inbound)
    for address in (ch["address"] for ch in doc["channels"].values()):
        concrete = re.sub(r"\{\w+\}", "x", address)
        assert (
            t.parse_outbound(concrete) or t.parse_inbound(concrete) or concrete in (t.probe,)
        ) or concrete.startswith("/tournament/"), address


def test_every_example_keeps_its_schema_and_the_crypto_ones_are_the_protocols() -> None:
    """The examples are built by the referee's own payload functions; the
    AsyncAPI parser does not check them against their schemas, so this does."""
    doc = DOC()
    components = doc["components"]
    examples = {n: m["examples"] for n, m in components["messages"].items() if "examples" in m}
    assert len(examples) >= 20
    for name, listed in examples.items():
        for example in listed:
            schema = {**components["messages"][name]["payload"], "components": components}
            jsonschema.validate(example["payload"], schema, cls=jsonschema.Draft7Validator)
    protocol = (ROOT / "docs" / "protocol.md").read_text()
    assert examples["place"][0]["payload"] in protocol  # section 3's worked example
    assert json.dumps(examples["fire"][0]["payload"], separators=(",", ":")) in protocol


# -- the AsyncAPI tooling ----------------------------------------------------------------


def _parser_dir(tmp_path_factory: pytest.TempPathFactory) -> Path | str:
    """Where @asyncapi/parser is installed (the node project's own node_modules,
    which .ci/run makes with `npm ci`), else installed from its lock file into
    a cache outside the checkout; a string says why there is none."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node and npm are not installed"
    if (NODE_PROJECT / "node_modules" / "@asyncapi" / "parser").is_dir():
        return NODE_PROJECT
    lock = (NODE_PROJECT / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "salvo" / "asyncapi"
    where = cache / hashlib.sha256(lock).hexdigest()[:16]
    if not (where / "node_modules" / "@asyncapi" / "parser").is_dir():
        where.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json", "validate.mjs"):
            shutil.copy(NODE_PROJECT / name, where / name)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--cache", str(cache / "npm")],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            return f"npm ci failed: {done.stderr[-500:]}"
    shutil.copy(NODE_PROJECT / "validate.mjs", where / "validate.mjs")
    return where


def test_the_asyncapi_parser_accepts_the_document_and_refuses_a_broken_one(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """tools/asyncapi/validate.mjs (@asyncapi/parser, pinned by its lock
    file) on the shipped document, and on a piece of it with a QoS of 7 (an
    error of the MQTT binding), so the check is seen to fail."""
    where = _parser_dir(tmp_path_factory)
    if isinstance(where, str):
        if os.environ.get("SALVO_REQUIRE_NODE"):
            pytest.fail(f"SALVO_REQUIRE_NODE is set: {where}")
        pytest.skip(f"{where}: the AsyncAPI parser cannot run here (.ci/run installs it)")
    doc = DOC()
    operation = json.loads(json.dumps(doc["operations"]["receiveGameState"]))
    operation["bindings"]["mqtt"]["qos"] = 7
    broken = tmp_path / "broken.json"  # one channel of the document, small: the parser takes seconds a document
    broken.write_text(
        json.dumps(
            {
                "asyncapi": doc["asyncapi"],
                "info": doc["info"],
                "channels": {"gameState": doc["channels"]["gameState"]},
                "operations": {"receiveGameState": operation},
                "components": {"messages": {m: doc["components"]["messages"][m] for m in ("state", "cleared")}},
            }
        )
    )
    run = subprocess.run(
        ["node", str(where / "validate.mjs"), str(SHIPPED), str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    valid = re.search(rf"^{re.escape(str(SHIPPED))}: (valid AsyncAPI 3\.0\.0: \d+ channels, .*? messages)", out, re.M)
    assert valid, out
    assert f"`{valid[1]}`" in (ROOT / "docs" / "protocol.md").read_text(), "protocol.md quotes another parser line"
    assert not re.search(rf"^{re.escape(str(SHIPPED))}: error ", out, re.MULTILINE), out
    assert re.search(rf"^{re.escape(str(broken))}: error .*\.qos: ", out, re.MULTILINE), out
    assert f"{broken}: INVALID" in out, out


# -- every payload of a real game ----------------------------------------------------------


class Contract:
    """The document as a checker: which channel a topic is on, and whether a
    payload is one of that channel's messages (python-jsonschema)."""

    def __init__(self, doc: dict[str, Any], prefix: str) -> None:
        self.components = doc["components"]
        self.channels: list[tuple[re.Pattern[str], str, list[dict[str, Any]]]] = []
        for cid, ch in doc["channels"].items():
            address = re.escape(ch["address"])
            pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", address)
            if not ch["address"].startswith("/tournament/"):
                pattern = re.escape(f"/{prefix}") + pattern
            messages = [self._resolve(m["$ref"]) for m in ch["messages"].values()]
            self.channels.append((re.compile(pattern), cid, messages))
        self.retained = {
            op["channel"]["$ref"].rsplit("/", 1)[1]
            for op in doc["operations"].values()
            if op["bindings"]["mqtt"]["retain"]
        } | {cid for cid, ch in doc["channels"].items() if "cleared" in ch["messages"]}

    def _resolve(self, ref: str) -> dict[str, Any]:
        found: dict[str, Any] = self.components["messages"][ref.rsplit("/", 1)[1]]
        return found

    def problem(self, msg: Msg) -> str | None:
        """Why this message breaks the contract (None: it keeps it)."""
        channel = next(((cid, ms) for rx, cid, ms in self.channels if rx.fullmatch(msg.topic)), None)
        if channel is None:
            return f"{msg.topic}: no channel in the document"
        cid, messages = channel
        if msg.retain and cid not in self.retained:
            return f"{msg.topic} ({cid}): retained, but the document says it is not"
        reasons = []
        for message in messages:
            try:
                value = self._decode(message, msg.payload)
                schema = {**message["payload"], "components": self.components}
                jsonschema.validate(value, schema, cls=jsonschema.Draft7Validator)
                return None
            except (ValueError, jsonschema.ValidationError) as exc:
                reasons.append(f"{message['name']}: {str(exc).splitlines()[0]}")
        return f"{msg.topic} ({cid}) {msg.payload[:120]!r}: " + "; ".join(reasons)

    def _decode(self, message: dict[str, Any], payload: bytes) -> Any:
        text = payload.decode("utf-8")
        if message["contentType"] == "application/json":
            return json.loads(text)
        schema = message["payload"]
        if "$ref" in schema:
            schema = self.components["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        return json.loads(text) if schema.get("type") in ("integer", "boolean") else text


def test_the_checker_refuses_what_the_document_does_not_allow() -> None:
    """The game test can fail: an unknown topic, a payload off its schema, a
    retained copy of a live-only topic and a cleared live-only topic are all refused."""
    contract = Contract(DOC(), "p")

    def msg(topic: str, payload: bytes, retain: bool = False) -> Msg:
        return Msg(topic, payload, retain, 0.0)

    assert contract.problem(msg("/p/game/state", b"turn")) is None
    assert contract.problem(msg("/p/game/state", b"", retain=True)) is None  # cleared
    assert contract.problem(msg("/p/players/count", b"3")) is None
    assert contract.problem(msg("/p/players/bob/hit", b'{"x":1,"y":2,"turn":1,"shot":1}')) is None
    assert "no channel" in str(contract.problem(msg("/p/game/nothing", b"1")))
    assert "no channel" in str(contract.problem(msg("/game/state", b"turn")))  # outside the arena
    assert "state" in str(contract.problem(msg("/p/game/state", b"playing")))
    assert "hit" in str(contract.problem(msg("/p/players/bob/hit", b'{"x":1,"y":2,"turn":1}')))
    assert "retained" in str(contract.problem(msg("/p/game/hits", b"2", retain=True)))
    assert contract.problem(msg("/p/game/errors", b"")) is not None
    assert contract.problem(msg("/p/game/errors", b'{"topic":"t","error":"e","code":"nope"}')) is not None
    assert contract.problem(msg("/p/game/errors", b'{"topic":"t","error":"e","code":"busy"}')) is None


def _played(
    broker: Mosquitto,
    prefix: str,
    start_referee: RefereeFactory,
    record: Recorder,
    inject: Callable[[], None],
    fired: list[str],
) -> None:
    start_referee(turn_timeout=10, reset_after=2)
    t = Topics(prefix)
    secrets = {n: f"{n}-{uuid.uuid4().hex[:6]}" for n in ("alice", "bob")}
    clients = [SalvoClient(n, s, broker.url(n), prefix=prefix).connect() for n, s in secrets.items()]
    try:
        inject()
        threads = [threading.Thread(target=c.play, args=(make_strategy("density", 1),), daemon=True) for c in clients]
        for thread in threads:
            thread.start()
        record.wait_for(t.state, "over", timeout=90)
        # alice's signed shot once the game is over: refused to her (not_in_turn) on her own error topic
        game = record.text(t.game_id) or ""
        shot = crypto.sign(clients[0].key, payloads.fire_data(0, 0, "bob", 1, game))
        fired.append(shot["signature"])
        record.client.publish(t.fire("bob"), json.dumps(shot), qos=1).wait_for_publish(10)
        record.wait(lambda m: m.topic == t.player_error("alice"), timeout=30)
        record.wait(lambda m: m.topic == t.record and not m.payload, timeout=30)  # the reset's clears
    finally:
        for c in clients:
            c.close()


def test_every_message_of_a_real_game_keeps_the_contract(
    broker: Mosquitto, prefix: str, start_referee: RefereeFactory
) -> None:
    """Two SDK bots play a whole game through the real referee; every message
    on ``#`` in the arena (the referee's, with its rights, and the bots'), and
    every retained topic a late subscriber gets, is on a channel of the
    document and is one of that channel's messages. Four refused messages
    bring the error channels in."""
    t = Topics(prefix)
    contract = Contract(DOC(), prefix)
    everything = Recorder(broker, "referee", ["#"])
    injected = {
        (t.request_participation, b'{"name": 7}'),  # malformed join: /game/errors
        (t.place("alice", "dinghy"), b"bm90IGEgYm94"),  # unknown ship: its error topic
        (t.fire("bob"), b"{}"),  # not a signed message: /game/errors
    }

    def inject() -> None:
        for topic, payload in injected:
            everything.client.publish(topic, payload, qos=1).wait_for_publish(10)

    try:
        shot_signature: list[str] = []
        _played(broker, prefix, start_referee, everything, inject, shot_signature)
        sync = f"/sync-{prefix}"
        everything.sync(sync)
        mine = [m for m in everything.messages if m.topic.startswith(f"/{prefix}/")]
        checked = [m for m in mine if (m.topic, m.payload) not in injected]
        problems = [p for m in checked if (p := contract.problem(m)) is not None]
        assert not problems, "\n".join(problems[:20])
        seen = {m.topic.split("/", 2)[2] for m in checked}
        for must in ("game/errors", "game/record", "game/stats/summary", "game/salvo", "game/server", "game/version"):
            assert must in seen, (must, sorted(seen))
        assert any(m.topic.endswith("/ships/dinghy/error") for m in checked)
        refused = next(m.json() for m in checked if m.topic == t.player_error("alice"))
        # (v2.1) the refusal names its shot, hits name their game, the version is announced
        assert refused["code"] == "not_in_turn" and refused["shot"] == {"target": "bob", "x": 0, "y": 0}
        assert refused["signature"] == shot_signature[0][:16]
        assert all("game" in m.json() for m in checked if m.topic.endswith("/hit"))
        assert everything.text(t.version) == payloads.PROTOCOL_VERSION
        assert any(m.topic.endswith("/hit") for m in checked) and any(m.topic.endswith("/fire") for m in checked)
    finally:
        everything.close()
    late = Recorder(broker, "referee", [f"/{prefix}/#"])  # every retained topic, with its retain flag
    try:
        late.sync(f"/{prefix}/game/sync-{uuid.uuid4().hex[:6]}")
        retained = [m for m in late.messages if m.retain]
        assert retained and all(contract.problem(m) is None for m in retained), [contract.problem(m) for m in retained]
    finally:
        late.close()
