"""The conformance suite: green against our referee through both entry points,
red against deliberately broken referees (each fault reaching the engine or
protocol layer as they are, and failing its own case for its own reason),
and a bug of the suite itself reported as an ERROR, never as a FAIL."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from salvo import cli
from salvo.arena import arena
from salvo.game import engine, events
from salvo.net.mqtt import Broker
from salvo.referee.service import Referee
from salvo.spec import payloads, wire
from salvo.spec.errors import Code, Malformed
from salvo.spec.rules import FLEET, SHIP_IDS
from salvo.spec.topics import is_valid_name
from salvo.tools.conformance import CASES, Options, SuiteBroken, lobby, run_suite, suite, summary
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import CODES, CaseFailed, NoReply, SuiteBug

from mosquitto import Mosquitto

# What the suite asks of the referee (salvo conformance prints the same).
SETTINGS: dict[str, Any] = {"placement_timeout": 3, "turn_timeout": 1.5, "reset_after": 1, "max_players": 6}
TEAMS = ["alice", "bob", "carol"]
N = len(CASES)


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


def test_the_suites_codes_are_the_documented_ones() -> None:
    # The suite keeps its own copy (it imports no referee code): it must not drift.
    assert {c.value for c in Code} == CODES


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
    assert lines[-1] == f"{N} passed, 0 failed", proc.stdout
    assert sum(line.startswith("PASS  §") for line in lines) == N == 74
    assert any("§6" in line and "salvo.order" in line for line in lines)


@pytest.mark.broker
@pytest.mark.long  # about 25 s: in `pytest -m long` (CI runs it)
def test_the_cli_referee_passes_on_an_open_broker(tmp_path: Path) -> None:
    """The documented 'no access control: nothing to give' mode: an open
    broker, where everybody reads everything, and the real `salvo referee`
    (it publishes its lease, which the shipped ACL hides from the suite's
    clients). The suite failed it: '/game/lease' still retained after the
    reset."""
    from salvo.tools.localbroker import private_mosquitto

    with private_mosquitto() as open_broker:
        url = f"mqtt://127.0.0.1:{open_broker.port}"
        timing = ["--placement-timeout", "3", "--turn-timeout", "1.5", "--reset-after", "1", "--max-players", "6"]
        files = ["--state", str(tmp_path / "r.db"), "--key-file", str(tmp_path / "r.key")]
        referee = subprocess.Popen(
            [sys.executable, "-m", "salvo", "referee", "--broker", url, "--prefix", "ci", *timing, *files],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "salvo", "conformance", "--broker", url, "--prefix", "ci"],
                check=False,
                capture_output=True,
                text=True,
                timeout=240,
            )
        finally:
            referee.terminate()
            referee.wait(10)
    # the cases that need the teams' logins are skipped here (nothing to give), none fails
    assert proc.stdout.splitlines()[-1] == f"{N - 3} passed, 0 failed, 3 skipped", proc.stdout + proc.stderr
    assert re.search(r"^PASS +§[0-9,]+ +over\.reset ", proc.stdout, re.MULTILINE), proc.stdout


@pytest.mark.long  # about 25 s: in `pytest -m long` (CI runs it) to keep the default run under 10 minutes
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
    assert f"{N - 1} passed, 1 skipped" in proc.stdout  # prefix.contained needs a prefix


def test_a_bug_of_the_suite_is_an_error_not_a_failure(
    broker: Mosquitto, start_referee: Any, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_referee(**SETTINGS)

    def buggy(_text: str) -> float:
        raise KeyError("bits")  # as a slip of the suite would

    monkeypatch.setattr(lobby, "id_bits", buggy)
    options = Options(
        broker=Broker(host="127.0.0.1", port=broker.port),
        prefix=prefix,
        referee_login=("referee", broker.users["referee"]),
        groups={"presence"},
    )
    lines: list[str] = []
    with pytest.raises(SuiteBroken) as raised:
        run_suite(options, report=lambda r: lines.append(r.line()))
    results = {r.case.id: r for r in raised.value.results}
    error = results["presence.game_id"]
    assert error.status == "error" and "KeyError" in error.detail and "lobby.py" in error.detail, error
    assert results["presence.server"].status == "pass"
    assert not [r for r in results.values() if r.status == "fail"]  # never blamed on the referee
    assert any(line.startswith("ERROR §4    presence.game_id") for line in lines), lines
    assert "1 ERROR (the suite broke, not the referee)" in summary(raised.value.results)
    # `salvo conformance` says so and exits 5, not 1 (a failing referee)
    args = ["conformance", "--prefix", prefix, "--only", "presence", *suite_args(broker, tmp_path)[:6]]
    outcome = CliRunner().invoke(cli.main, args)
    assert outcome.exit_code == 5, outcome.output
    assert "ERROR §4    presence.game_id" in outcome.output
    assert "The conformance suite itself broke in presence.game_id" in outcome.output


# -- what the suite blames on the referee, without a broker -------------------------------------

NOWHERE = Options(broker=Broker(host="127.0.0.1", port=9))  # never connected to here


@pytest.mark.parametrize(
    ("raised", "status"),
    [
        (CaseFailed("the referee broke the rule"), "fail"),
        (NoReply("nothing within 5s"), "fail"),
        (KeyError("topic"), "error"),
        (TypeError("'NoneType' object is not subscriptable"), "error"),
        (AssertionError("an invariant of the suite"), "error"),
    ],
    ids=["CaseFailed", "NoReply", "KeyError", "TypeError", "AssertionError"],
)
def test_a_case_fails_only_for_a_broken_rule_or_no_reply(raised: Exception, status: str) -> None:
    s = Session(NOWHERE)
    if status == "fail":
        with s.case("presence.server"):
            raise raised
    else:  # the suite's own exception: stops the run, as SuiteBug
        with pytest.raises(SuiteBug) as bug, s.case("presence.server"):
            raise raised
        assert bug.value.case_id == "presence.server" and bug.value.error is raised
    result = s.results["presence.server"]
    assert result.status == status, result
    assert (type(raised).__name__ in result.detail) == (status == "error"), result.detail
    assert result.line().startswith("FAIL " if status == "fail" else "ERROR")


def no_broker(monkeypatch: pytest.MonkeyPatch, preflight: Callable[[Session], str]) -> None:
    """A suite whose first stage is ``preflight``, with no connections (and
    so no final checks over what they saw)."""
    monkeypatch.setattr(Session, "setup", lambda self: None)
    monkeypatch.setattr(Session, "close", lambda self: None)
    monkeypatch.setattr(suite, "preflight", preflight)
    monkeypatch.setattr(suite, "final_checks", lambda s: None)


def test_an_exception_of_the_suite_outside_any_case_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_s: Session) -> str:
        seen: dict[str, str] = {}
        return seen["game_id"]  # a KeyError, as a slip of the suite would raise

    no_broker(monkeypatch, broken)
    with pytest.raises(SuiteBroken) as raised:
        run_suite(NOWHERE)
    results = raised.value.results
    assert len(results) == N and {r.status for r in results} == {"error"}
    assert all("outside any case" in r.detail and "KeyError" in r.detail for r in results), results[0]
    assert raised.value.exit_code == 5  # `salvo conformance`: not 1, a failing referee
    assert summary(results) == f"0 passed, 0 failed, {N} ERROR (the suite broke, not the referee)"


def test_a_referee_that_does_not_answer_fails_and_is_no_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(_s: Session) -> str:
        raise NoReply("nothing on /game/server within 10s")

    no_broker(monkeypatch, silent)
    results = run_suite(NOWHERE)  # no SuiteBroken
    assert {r.status for r in results} == {"fail"}
    assert all("nothing on /game/server" in r.detail for r in results), results[0]


# -- broken referees: each fault must be reported --------------------------------------------


def sinks_per_shot(monkeypatch: pytest.MonkeyPatch) -> None:
    original = engine.Game._fire

    def fire(self: engine.Game, ev: events.Fire) -> events.Accepted:
        result = original(self, ev)
        target = self.players[ev.target]
        for ship in SHIP_IDS:
            if ship not in target.sunk and len(target.damage[ship]) == FLEET[ship]:
                # told at once, after every shot that completes it: a leak
                result.effects.append(payloads.Publish(self.topics.sunk(ev.target, ship), payloads.TRUE, True))
        return result

    monkeypatch.setattr(engine.Game, "_fire", fire)


def redelivery_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Shots keep no nonce: an accepted message delivered again is a new shot.
    original = engine.Game.handle

    def handle(self: engine.Game, event: events.Event) -> events.Result:
        if type(event) is events.Fire:
            event = event._replace(nonce=None)
        return original(self, event)

    monkeypatch.setattr(engine.Game, "handle", handle)


def rejected_nonces_not_burned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine.Game, "_burn", lambda self, ev: "nonce not kept")


def game_id_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    original = engine.Game._fire
    monkeypatch.setattr(engine.Game, "_fire", lambda self, ev: original(self, ev._replace(game=None)))


def wrong_shot_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    # one shot too many for a player who lost a ship (but not all of them)
    monkeypatch.setattr(
        events.PlayerState, "afloat", property(lambda p: len(FLEET) - len(p.sunk) + (0 < len(p.sunk) < len(FLEET)))
    )


def sealed_join_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    original = arena.Arena._open_join

    def open_join(self: arena.Arena, payload: bytes) -> tuple[object, bool]:
        if payload.lstrip()[:1] != b"{":
            raise Malformed("sealed requests are not supported")
        return original(self, payload)

    monkeypatch.setattr(arena.Arena, "_open_join", open_join)


def join_refusals_on_the_players_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    # The v1 routing: a refused join told on /players/<name>/error.
    def reroute(room: arena.Arena, effects: list[arena.Effect], name: object) -> list[arena.Effect]:
        if not isinstance(name, str) or not is_valid_name(name):
            return effects
        t = room.topics
        return [
            e._replace(topic=t.player_error(name)) if isinstance(e, payloads.Publish) and e.topic == t.errors else e
            for e in effects
        ]

    join, apply_join = arena.Arena._join, arena.Arena._apply_join

    def joined(self: arena.Arena, topic: str, route: Any, payload: bytes, now: float) -> list[arena.Effect]:
        effects = join(self, topic, route, payload, now)  # a bad payload raises here, as it would
        value = json.loads(payload) if payload.lstrip()[:1] == b"{" else None
        return reroute(self, effects, value.get("name") if isinstance(value, dict) else None)

    def applied(self: arena.Arena, event: events.Join, request_ids: list[str]) -> list[arena.Effect]:
        return reroute(self, apply_join(self, event, request_ids), event.name)

    monkeypatch.setattr(arena.Arena, "_join", joined)
    monkeypatch.setattr(arena.Arena, "_apply_join", applied)


def fire_refusals_name_no_shot(monkeypatch: pytest.MonkeyPatch) -> None:
    # The v2 report: topic, error and code only.
    report = arena.Arena._report

    def plain(self: arena.Arena, *args: Any, signed: object = None, **kw: Any) -> list[arena.Effect]:
        return report(self, *args, **kw)

    monkeypatch.setattr(arena.Arena, "_report", plain)


def hits_without_game(monkeypatch: pytest.MonkeyPatch) -> None:
    # The v2 hit: {x, y, turn, shot}.
    monkeypatch.setattr(payloads, "_HIT_TAILS", tuple(t.removesuffix(',"game":') for t in payloads._HIT_TAILS))
    monkeypatch.setattr(payloads, "hit_end", lambda game: "}")


def join_game_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    original = wire.parse_join
    monkeypatch.setattr(wire, "parse_join", lambda value: original(value).model_copy(update={"game": None}))


Fault = Callable[[pytest.MonkeyPatch], None]
#: fault, the cases to run (the games stop once they have results), and for
#: each case that must fail a pattern of its reason (re.search)
FAULTS: list[tuple[Fault, set[str], dict[str, str]]] = [
    (sinks_per_shot, {"salvo.sinks_at_end"}, {"salvo.sinks_at_end": "a sink was announced before the salvo's last"}),
    (
        redelivery_counted,
        {"fire.redelivery", "fire.replay"},
        {"fire.redelivery": "the redelivery was a second shot"},
    ),
    (
        rejected_nonces_not_burned,
        {"fire.replay", "fire.redelivery"},
        {"fire.replay": "sent again when it would be valid must be refused as replayed"},
    ),
    (
        game_id_unchecked,
        {"fire.wrong_game", "fire.wrong_turn", "fire.wrong_target"},
        {"fire.wrong_game": "no wrong_game report for /"},
    ),
    (wrong_shot_allowance, {"turn.allowance"}, {"turn.allowance": r"turn \d+: \d+ shots allowed, \d+ ships afloat"}),
    (sealed_join_ignored, {"join.sealed"}, {"join.sealed": "the sealed join was refused: .*malformed"}),
    (
        join_refusals_on_the_players_topic,
        {"join.refusals", "join.taken"},
        {"join.refusals": "join came on /[^ ]+/players/[^ ]+/error, not on /[^ ]+/game/errors"},
    ),
    (
        fire_refusals_name_no_shot,
        {"fire.names_shot", "fire.bad_signature"},
        {"fire.names_shot": r"\(bad_signature\): \{'signature': None, 'shot': None\} should be"},
    ),
    (hits_without_game, {"fire.hit_game", "fire.hit_payload"}, {"fire.hit_game": "hit 1 is not of game"}),
    (join_game_ignored, {"join.wrong_game"}, {"join.wrong_game": "wrong_game|refusal"}),
]
#: cases every broken referee here still passes: the suite fails the fault, not everything
CONTROL = {"presence.server", "presence.game_id", "join.plain"}


@pytest.mark.parametrize(("fault", "cases", "failing"), FAULTS, ids=[f.__name__ for f, _c, _r in FAULTS])
def test_suite_reports_each_injected_fault(
    broker: Mosquitto,
    start_referee: Any,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    fault: Fault,
    cases: set[str],
    failing: dict[str, str],
) -> None:
    fault(monkeypatch)
    ref: Referee = start_referee(**SETTINGS)
    options = Options(
        broker=Broker(host="127.0.0.1", port=broker.port),
        prefix=prefix,
        referee_login=("referee", broker.users["referee"]),
        cases=cases | CONTROL,
    )
    results = {r.case.id: r for r in run_suite(options)}  # (a suite bug raises SuiteBroken)
    # (a) the fault made the referee misbehave, nothing more: a hook that no
    # longer fits the code it patches would crash the arena or poison every
    # message it meets, and the suite would fail the case for that instead
    assert_stayed_up(ref)
    # (b) its case failed, for its own reason; the others passed
    for case_id, reason in failing.items():
        assert results[case_id].status == "fail" and re.search(reason, results[case_id].detail), results[case_id]
    passing = {c: results[c].status for c in cases | CONTROL if c not in failing}
    assert set(passing.values()) == {"pass"}, {c: results[c] for c in passing}


def assert_stayed_up(ref: Referee) -> None:
    assert ref.fatal is None, ref.fatal
    assert all(runner.alive for runner in ref.runners), "an arena stopped"
    poisoned = sum(runner.dispatcher.poisoned for runner in ref.runners)
    assert poisoned == 0, f"{poisoned} messages met a bug of the referee (see the log): the fault crashed it"
