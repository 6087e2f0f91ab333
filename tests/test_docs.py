"""docs/protocol.md must stay true: its crypto vectors, its example payloads
and its play-by-hand code are checked against the real thing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from salvo import crypto, wire
from test_crypto import FIRE_DATA, KEY_HEX, SALT_HEX, SEALED_PLACEMENT, SIGNATURE

from mosquitto import Mosquitto

DOC = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()


def test_worked_crypto_example_is_correct() -> None:
    assert f"`{SALT_HEX}`" in DOC
    assert f"`{KEY_HEX}`" in DOC
    assert crypto.derive_team_key("alice", "correct horse battery staple").hex() == KEY_HEX
    assert SEALED_PLACEMENT in DOC
    fire = json.dumps({"data": FIRE_DATA, "signature": SIGNATURE}, separators=(",", ":"))
    assert fire in DOC


EXAMPLES: dict[str, type[BaseModel]] = {
    "/game/deadline": wire.Deadline,
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
    row = next(line for line in DOC.splitlines() if line.startswith(f"| `{topic}` |"))
    example = re.search(r"`(\{.*?\})`", row.split("|")[4])
    assert example, row
    parsed = EXAMPLES[topic].model_validate_json(example[1])
    assert set(json.loads(example[1])) == set(type(parsed).model_fields)


def by_hand_blocks() -> dict[str, str]:
    blocks = re.findall(r"```python\n# by-hand: (\w+)\n(.*?)```", DOC, flags=re.DOTALL)
    return dict(blocks)


@pytest.mark.mqtt
def test_play_a_game_by_hand_as_documented(
    broker: Mosquitto, start_referee: Any, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = by_hand_blocks()
    assert set(blocks) == {"settings", "library", "play"}
    start_referee(turn_timeout=20)
    namespace: dict[str, Any] = {}
    exec(blocks["settings"], namespace)
    namespace.update(HOST="127.0.0.1", PORT=broker.port, PREFIX=prefix)
    assert set(namespace["PASSWORDS"].items()) <= set(broker.users.items())
    exec(blocks["library"], namespace)
    try:
        exec(blocks["play"], namespace)
        out = capsys.readouterr().out
        assert re.search(r"winner: (alice|bob|carol) \{.*\"termination\":\"victory\"", out), out
    finally:
        for team in namespace.get("teams", {}).values():
            team.client.loop_stop()
            team.client.disconnect()
