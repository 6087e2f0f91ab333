"""The conformance suite: green against our referee through both entry points,
red against deliberately broken referees."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from salvo import engine, protocol
from salvo.conformance import Options, run_suite
from salvo.errors import Malformed
from salvo.mqtt import Broker
from salvo.rules import FLEET, SHIP_IDS

from mosquitto import Mosquitto

pytestmark = pytest.mark.mqtt

# What the suite asks of the referee (salvo conformance prints the same).
SETTINGS: dict[str, Any] = {"placement_timeout": 3, "turn_timeout": 1.5, "reset_after": 1, "max_players": 6}
TEAMS = ["alice", "bob", "carol"]


def credentials(broker: Mosquitto, tmp_path: Path) -> Path:
    path = tmp_path / "teams.txt"
    path.write_text("".join(f"{n}:{broker.users[n]}\n" for n in TEAMS))
    return path


def suite_args(broker: Mosquitto, tmp_path: Path) -> list[str]:
    return [
        "--broker",
        f"mqtt://127.0.0.1:{broker.port}",
        "--referee-user",
        "referee",
        "--referee-password",
        broker.users["referee"],
        "--team-credentials",
        str(credentials(broker, tmp_path)),
    ]


def test_cli_suite_passes_against_our_referee_with_a_prefix(
    broker: Mosquitto, start_referee: Any, prefix: str, tmp_path: Path
) -> None:
    start_referee(**SETTINGS)
    proc = subprocess.run(
        [sys.executable, "-m", "salvo", "conformance", "--prefix", prefix, *suite_args(broker, tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("60 passed, 0 failed"), proc.stdout
    assert sum(line.startswith("PASS  §") for line in lines) == 60
    assert any("§6" in line and "salvo.order" in line for line in lines)


def test_pytest_entry_point_passes_without_a_prefix(broker: Mosquitto, start_referee: Any, tmp_path: Path) -> None:
    start_referee(prefixes=[""], **SETTINGS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--pyargs",
            "salvo.conformance",
            *suite_args(broker, tmp_path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "59 passed, 1 skipped" in proc.stdout  # prefix.contained needs a prefix


# -- broken referees: each fault must be reported --------------------------------------------


def sinks_per_shot(monkeypatch: pytest.MonkeyPatch) -> None:
    original = engine.Game._fire

    def fire(self: engine.Game, ev: engine.Fire, out: list[engine.Publish]) -> str:
        summary = original(self, ev, out)
        target = self.players.get(ev.target)
        for ship in SHIP_IDS if target else ():
            assert target is not None
            if ship not in target.sunk and len(target.damage[ship]) == FLEET[ship]:
                self._pub(out, self.topics.sunk(ev.target, ship), "true")  # told at once: a leak
        return summary

    monkeypatch.setattr(engine.Game, "_fire", fire)


def replays_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = engine.Game.handle

    def handle(self: engine.Game, event: engine.Event) -> engine.Result:
        if isinstance(event, engine.Fire):
            event = dataclasses.replace(event, nonce=None)
        return original(self, event)

    monkeypatch.setattr(engine.Game, "handle", handle)


def wrong_shot_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    # one shot too many for a player who lost a ship (but not all of them)
    monkeypatch.setattr(
        engine.PlayerState, "afloat", property(lambda p: len(FLEET) - len(p.sunk) + (0 < len(p.sunk) < len(FLEET)))
    )


def sealed_join_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    original = protocol.Arena._open_join

    def open_join(self: protocol.Arena, payload: bytes) -> object:
        if payload.lstrip()[:1] != b"{":
            raise Malformed("sealed requests are not supported")
        return original(self, payload)

    monkeypatch.setattr(protocol.Arena, "_open_join", open_join)


FAULTS: list[tuple[Callable[[pytest.MonkeyPatch], None], str]] = [
    (sinks_per_shot, "salvo.sinks_at_end"),
    (replays_accepted, "fire.replay"),
    (wrong_shot_allowance, "turn.allowance"),
    (sealed_join_ignored, "join.sealed"),
]


@pytest.mark.parametrize(("fault", "case_id"), FAULTS, ids=[f.__name__ for f, _ in FAULTS])
def test_suite_reports_each_injected_fault(
    broker: Mosquitto,
    start_referee: Any,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    fault: Callable[[pytest.MonkeyPatch], None],
    case_id: str,
) -> None:
    fault(monkeypatch)
    start_referee(**SETTINGS)
    options = Options(
        broker=Broker(host="127.0.0.1", port=broker.port),
        prefix=prefix,
        referee_login=("referee", broker.users["referee"]),
        groups={"presence", "join", "turn", "fire", "salvo"},  # game 1 is enough
    )
    results = {r.case.id: r for r in run_suite(options)}
    assert results[case_id].status == "fail", results[case_id]
    assert any(r.status == "pass" for r in results.values()), "the broken referee still passes most cases"
