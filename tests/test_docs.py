"""docs/protocol.md must stay true: its crypto vectors, its example payloads,
its error-code table and its play-by-hand code are checked against the real
thing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from salvo.spec import codec, crypto, payloads, wire
from salvo.spec.errors import Code
from salvo.spec.rules import Orientation, Placement
from salvo.spec.topics import Topics, matches
from test_crypto import (
    BOUND_FIRE_DATA,
    BOUND_FIRE_TEXT,
    BOUND_SIGNATURE,
    GAME_ID,
    KEY,
    KEY_HEX,
    PLACEMENT,
    SALT_HEX,
    SEALED_PLACEMENT,
)

from kit import COLUMNS, ROWS, ArenaDriver
from mosquitto import Mosquitto

DOC = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
FIRE_MESSAGE = codec.dumps({"data": BOUND_FIRE_DATA, "signature": BOUND_SIGNATURE})


def section(number: int) -> str:
    """The text of section ``number`` (from its heading to the next one)."""
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", DOC, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no section {number}"
    return match[0]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the markdown tables in ``text``, as stripped cells."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def test_the_document_stands_alone_and_says_it_is_v2() -> None:
    assert DOC.startswith("# ") and f"v{payloads.PROTOCOL_VERSION}" in DOC.splitlines()[0]
    # Teams never see the project's internal spec: nothing may point there.
    assert "shared/" not in DOC
    assert "normative" not in DOC.lower()


def test_worked_crypto_example_is_correct() -> None:
    assert f"`{SALT_HEX}`" in DOC
    assert f"`{KEY_HEX}`" in DOC
    assert crypto.derive_team_key("alice", "correct horse battery staple").hex() == KEY_HEX
    assert f"`{PLACEMENT}`" in DOC
    assert f"```text\n{SEALED_PLACEMENT}\n```" in DOC
    # the bound fire: its data, the game id it names and the signed message
    assert f"`/game/id` says `{GAME_ID}`" in DOC
    assert f"```json\n{BOUND_FIRE_TEXT}\n```" in DOC
    assert f"```json\n{FIRE_MESSAGE}\n```" in DOC
    assert crypto.sign(KEY, BOUND_FIRE_DATA, nonce=bytes(range(24, 48)))["signature"] == BOUND_SIGNATURE


TOPICS = Topics()
DOCUMENTED = {
    TOPICS.server,
    TOPICS.pubkey,
    TOPICS.lease,
    TOPICS.game_id,
    TOPICS.state,
    TOPICS.deadline,
    TOPICS.request_participation,
    TOPICS.players_list,
    TOPICS.players_count,
    TOPICS.place("<name>", "<ship>"),
    TOPICS.approved("<name>", "<ship>"),
    TOPICS.ship_error("<name>", "<ship>"),
    TOPICS.turn,
    TOPICS.current,
    TOPICS.fire("<target>"),
    TOPICS.hit("<target>"),
    TOPICS.hits,
    TOPICS.salvo,
    TOPICS.sunk("<name>", "<ship>"),
    TOPICS.defeated("<name>"),
    TOPICS.player_error("<name>"),
    TOPICS.errors,
    TOPICS.winner,
    TOPICS.stats_summary,
    TOPICS.stats_player("<name>"),
    TOPICS.record,
    TOPICS.version,
}


def topic_table() -> dict[str, list[str]]:
    rows = table_rows(section(4))
    table = {row[0].strip("`"): row for row in rows}
    assert len(table) == len(rows), "a topic is listed twice"
    return table


def test_topic_table_lists_every_topic_of_the_protocol() -> None:
    table = topic_table()
    assert set(table) == DOCUMENTED
    concrete = [t.replace("<name>", "n").replace("<target>", "n").replace("<ship>", "s") for t in table]
    for family in (*TOPICS.public_filters, *TOPICS.inbound_filters):
        assert any(matches(family, t) for t in concrete), f"{family} is not in the topic table"


EXAMPLES: dict[str, type[BaseModel]] = {
    "/game/deadline": wire.Deadline,
    "/game/request_participation": wire.JoinRequest,
    "/game/turn": wire.TurnInfo,
    "/game/salvo": wire.SalvoResult,
    "/players/<target>/hit": wire.Hit,
    "/players/<name>/ships/<ship>/error": wire.ErrorReport,
    "/players/<name>/error": wire.ErrorReport,
    "/game/errors": wire.ErrorReport,
    "/game/stats/summary": wire.StatsSummary,
    "/game/stats/players/<name>": wire.PlayerStats,
}


@pytest.mark.parametrize("topic", list(EXAMPLES))
def test_topic_table_examples_match_the_wire_models(topic: str) -> None:
    payload = topic_table()[topic][3]
    example = re.search(r"`(\{.*?\})`", payload)
    assert example, payload
    EXAMPLES[topic].model_validate_json(example[1])  # every required field, the right types
    # and no field the model would silently ignore (a typo, a v1 leftover)
    assert set(json.loads(example[1])) <= set(EXAMPLES[topic].model_fields)


def test_topic_table_fire_and_game_id_are_the_worked_example() -> None:
    table = topic_table()
    assert f"`{FIRE_MESSAGE}`" in table["/players/<target>/fire"][3]
    signed = wire.parse_signed(json.loads(FIRE_MESSAGE))
    bound = wire.parse_fire(signed.data)
    assert crypto.verify(KEY, signed.data, signed.signature)
    assert table["/game/id"][3].startswith(f"`{GAME_ID}`")
    assert bound.game == GAME_ID and re.fullmatch(r"[0-9a-f]{16}", GAME_ID)


def test_example_reports_and_hit_are_what_the_referee_publishes() -> None:
    """Every error report and hit quoted in the document, reproduced byte for
    byte by the protocol layer (no broker: the same code the referee runs)."""
    d = ArenaDriver(game_id=GAME_ID)
    d.join("alice")
    d.join("bob")
    quoted: list[str] = []
    out = d.place("alice", {"carrier": Placement(7, 0, Orientation.HORIZONTAL)})
    quoted += [p.payload for p in out if p.topic == d.t.ship_error("alice", "carrier")]
    out = d.join("bob", "not bob's secret", request_id="5b0e3c1f9a7d4e26")
    quoted += [p.payload for p in out if p.topic == d.t.errors]
    d.place("alice", ROWS)
    d.place("bob", COLUMNS)
    assert d.game.current == "alice" and d.game.turn == 1
    # bob's shot out of turn, signed with the worked example's nonce: reported to bob,
    # (v2.1) naming the shot by its signature's first 16 characters and its cell
    shot = crypto.sign(d.key("bob"), payloads.fire_data(3, 4, "alice", 1, GAME_ID), nonce=bytes(range(24, 48)))
    out = d.send(d.t.fire("alice"), json.dumps(shot))
    quoted += [p.payload for p in out if p.topic == d.t.player_error("bob")]
    out = d.fire("alice", "bob", 3, 4)
    quoted += [p.payload for p in out if p.topic == d.t.hit("bob")]

    lobby = ArenaDriver()
    lobby.join("carol")
    out = lobby.run(lobby.arena.close_lobby("no-show: bob not ready 120s after the assignment", lobby.now))
    quoted += [p.payload for p in out if p.topic == lobby.t.player_error("carol")]
    late = ArenaDriver(placement_timeout=60)
    late.join("carol")
    out = late.run(late.arena.on_tick(late.now + 60))
    quoted += [p.payload for p in out if p.topic == late.t.player_error("carol")]

    # (v2.1) a join for another game than /game/id, its invalid request_id cut to 64 characters
    nxt = ArenaDriver(game_id="79cc032a6de8eeda")
    out = nxt.send(nxt.t.request_participation, json.dumps({"name": "dave", "secret": "s", "game": GAME_ID}))
    quoted += [p.payload for p in out if p.topic == nxt.t.errors]
    out = nxt.send(nxt.t.request_participation, json.dumps({"name": "dave", "secret": "s", "request_id": "a b"}))
    quoted += [p.payload for p in out if p.topic == nxt.t.errors]
    assert nxt.game.players == {}, "a refused join changed the lobby"

    codes = [json.loads(q).get("code") for q in quoted]
    assert codes == [
        "off_board",
        "name_taken",
        "not_current_player",
        None,
        "lobby_closed",
        "left_out",
        "wrong_game",
        "malformed",
    ]
    for payload in quoted:
        assert f"`{payload}`" in DOC, payload


def test_error_code_table_lists_exactly_the_codes() -> None:
    rows = table_rows(section(8))
    listed = [row[0].strip("`") for row in rows]
    assert len(listed) == len(set(listed)), "a code is listed twice"
    assert set(listed) == {code.value for code in Code}
    assert all(len(row) == 4 and all(row) for row in rows), "every code says what, for which messages, where"


def by_hand_blocks() -> dict[str, str]:
    blocks = re.findall(r"```python\n# by-hand: (\w+)\n(.*?)```", DOC, flags=re.DOTALL)
    return dict(blocks)


def test_play_a_game_by_hand_as_documented(
    broker: Mosquitto, start_referee: Any, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = by_hand_blocks()
    assert set(blocks) == {"settings", "library", "play"}
    start_referee(turn_timeout=20)
    namespace: dict[str, Any] = {}
    exec(blocks["settings"], namespace)
    # as at the venue: the teams over TLS, verifying the broker with the organiser's CA
    namespace.update(HOST="127.0.0.1", PORT=broker.tls_port, PREFIX=prefix, CA_FILE=str(broker.ca_file))
    assert set(namespace["PASSWORDS"].items()) <= set(broker.users.items())
    exec(blocks["library"], namespace)
    try:
        exec(blocks["play"], namespace)
        out = capsys.readouterr().out
        assert "join refused: name_taken: name taken: 'bob' already joined with another secret" in out, out
        assert re.search(r"winner: (alice|bob|carol) \{.*\"termination\":\"victory\"", out), out
        # every shot and placement was taken: the only report is the impostor's refusal
        reports = [r for team in namespace["teams"].values() for r in team.reports]
        assert reports and {r["code"] for r in reports} == {"name_taken"}, reports
    finally:
        for team in [*namespace.get("teams", {}).values(), namespace.get("impostor")]:
            if team is not None:
                team.close()


# -- every test the documents name exists ---------------------------------------------------------

_ROOT = Path(__file__).resolve().parent.parent
_REF = re.compile(r"(?:tests/)?(test_\w+\.py)?::(test_\w+)|(test_\w+\.py)\b")


def _documents() -> list[Path]:
    """Every document that may name a test: the README, CONTRIBUTING.md,
    CHANGELOG.md, docs/ and the examples' READMEs."""
    docs = [_ROOT / "README.md", _ROOT / "CONTRIBUTING.md", _ROOT / "CHANGELOG.md"]
    return docs + sorted((_ROOT / "docs").glob("*.md")) + sorted((_ROOT / "examples").glob("*/README.md"))


def _named_tests() -> list[tuple[str, str, str]]:
    """(document, test file, test name) of every ``file::name`` and of every
    ``::name`` after it (the file named last) in :func:`_documents`; a test
    file named alone has the name ``""``."""
    found = []
    for doc in _documents():
        last = ""
        for m in _REF.finditer(doc.read_text()):
            last = m.group(1) or m.group(3) or last
            found.append((str(doc.relative_to(_ROOT)), last, m.group(2) or ""))
    return found


def test_every_test_the_documents_name_exists() -> None:
    refs = _named_tests()
    named = {doc for doc, _file, _name in refs}
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "examples/js/README.md"} <= named  # all are read
    assert sum(1 for _doc, _file, name in refs if name) > 40  # the pattern still finds them
    missing = []
    for doc, file, name in refs:
        path = _ROOT / "tests" / file
        if (
            not file
            or not path.exists()
            or (name and not re.search(rf"^(async )?def {name}\(", path.read_text(), re.M))
        ):
            missing.append(f"{doc}: {file or '?'}::{name}")
    assert missing == []
