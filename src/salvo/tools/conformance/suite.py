"""The conformance suite: drives scripted teams through two whole games on a
live referee and judges only what the referee publishes (protocol v2).

Game 1 covers presence, joining, placing, the deadline start, turns, firing
(every kind of bad fire message, attribution, replays and redeliveries),
salvo ends, defeats, the end and the reset. Game 2 covers garbage input, a
lobby held full by names that never place, the immediate start, and
timeouts up to a drop. The phases live in their own modules (lobby, place,
start, turns, fire, over, game2, final); this one runs them and keeps score.

A case FAILs only when the referee broke its rule or did not answer in time;
when the suite itself breaks, the case is an ERROR, nothing more is judged,
and :func:`run_suite` raises :class:`SuiteBroken` (``salvo conformance``
exits with code 5) once every result was reported.

What the referee under test needs (it is checked, see ``settings.timeouts``):
min-players 2, placement timeout 1-10 s, turn timeout up to 5 s, reset-after
up to 10 s, max-players up to 30, and, on a broker with access control, a
login that reads everything (``--referee-user``) plus three team logins.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import click

from salvo.tools.conformance.cases import CASES
from salvo.tools.conformance.final import RECOMMENDED, final_checks
from salvo.tools.conformance.game2 import game2
from salvo.tools.conformance.lobby import joins, preflight
from salvo.tools.conformance.over import check_over
from salvo.tools.conformance.place import placements
from salvo.tools.conformance.session import Options, Session
from salvo.tools.conformance.start import deadline_start
from salvo.tools.conformance.turns import play
from salvo.tools.conformance.verdict import Abort, CaseFailed, Enough, NoReply, Result, SuiteBug

__all__ = [
    "RECOMMENDED",
    "CaseFailed",
    "Options",
    "Result",
    "SuiteBroken",
    "read_team_credentials",
    "run_suite",
    "summary",
]

PREFLIGHT = {"presence.server", "presence.pubkey", "presence.lobby", "presence.game_id", "presence.version"}
GAME2_CASES = {
    "start.too_few",
    "start.squatters",
    "start.all_ready",
    "robust.garbage",
    "robust.continues",
    "timeout.partial",
    "timeout.drop",
}
#: judged over what both games recorded
FINAL_CASES = {
    "settings.timeouts",
    "privacy.secrets",
    "robust.codes",
    "join.refusals",
    "acl.private",
    "acl.join_topic",
    "acl.anonymous",
    "prefix.contained",
}
GAME1_CASES = set(CASES) - PREFLIGHT - GAME2_CASES - FINAL_CASES

T = TypeVar("T")


class SuiteBroken(click.ClickException):
    """The suite itself broke: some results are ERROR. Raised by
    :func:`run_suite` after every result was reported; ``results`` has them
    all. (A ClickException, so ``salvo conformance`` says so and exits 5.)"""

    exit_code = 5

    def __init__(self, results: list[Result], bug: SuiteBug) -> None:
        self.results = results
        where = f" in {bug.case_id}" if bug.case_id else ""
        super().__init__(
            f"{summary(results)}. The conformance suite itself broke{where}: {bug}; "
            "the referee was not judged from there on. Please report this bug of the suite."
        )


def read_team_credentials(text: str) -> list[tuple[str, str]]:
    """``name:password`` per line (``#`` comments), or a JSON object."""
    stripped = text.strip()
    if stripped.startswith("{"):
        data = json.loads(stripped)
        return [(str(k), str(v)) for k, v in data.items()]
    pairs = []
    for raw in stripped.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, password = line.partition(":")
            pairs.append((name.strip(), password.strip()))
    return pairs


class Suite:
    def __init__(self, options: Options, report: Callable[[Result], None] | None = None) -> None:
        self.s = Session(options, report)
        self.stopped = ""  # why a game stopped early: a failure of the referee
        self.bug: SuiteBug | None = None
        self.enough = False

    def run(self) -> list[Result]:
        s = self.s
        try:
            s.setup()  # a refused login is the caller's error, not a result
        except ConnectionError:
            s.close()
            raise
        try:
            self._games()
            if self.bug is None:
                self._guard("the final checks", lambda: final_checks(s))
        finally:
            s.close()
        return self._complete()

    def _games(self) -> None:
        s = self.s
        game_id = self._guard("the preflight", lambda: preflight(s))
        if game_id is None:
            return
        if s.wants_any(GAME1_CASES | FINAL_CASES):
            self._guard("game 1", lambda: self._game1(game_id))
        if self.bug is None and not self.enough and s.wants_any(GAME2_CASES | FINAL_CASES):
            self._guard("game 2", self._game2)

    def _game1(self, game_id: str) -> None:
        s = self.s
        a, b, c = s.teams
        g = joins(s, a, b, c, game_id)
        s.checkpoint()
        placements(s, g)
        s.checkpoint()
        model = deadline_start(s, g)
        play(s, g, model)
        check_over(s, g, model, a.name)

    def _game2(self) -> None:
        self.s.await_idle_lobby(self.s.learned.get("reset", 10) + 20)
        game2(self.s)

    def _guard(self, what: str, step: Callable[[], T]) -> T | None:
        """Run one stage; a failure of the referee stops it (and is noted),
        a bug of the suite stops everything."""
        try:
            return step()
        except Enough:
            self.enough = True
        except (Abort, CaseFailed, NoReply) as exc:
            self.stopped = self.stopped or f"{what} stopped: {exc}"
        except SuiteBug as bug:
            self.bug = bug
        except Exception as exc:  # a bug outside any case: the cases not judged yet say so
            self.bug = SuiteBug(None, exc)
        return None

    def _complete(self) -> list[Result]:
        s = self.s
        for case_id in CASES:
            if case_id in s.results:
                continue
            if not s.wanted(case_id):
                s.skip(case_id, "not selected")
            elif self.bug is not None:
                where = f"in {self.bug.case_id}" if self.bug.case_id else f"outside any case: {self.bug}"
                s.record(case_id, "error", f"not judged: the suite itself broke {where}")
            else:
                s.record(case_id, "fail", f"not reached ({self.stopped or 'no result'})")
        results = [s.results[c] for c in CASES]
        if self.bug is not None:
            raise SuiteBroken(results, self.bug)
        return results


def run_suite(options: Options, report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the suite; every result goes to ``report`` as it is known.
    Raises :class:`SuiteBroken` (with all results) if the suite broke."""
    return Suite(options, report).run()


def summary(results: list[Result]) -> str:
    n = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "error", "skip")}
    text = f"{n['pass']} passed, {n['fail']} failed"
    if n["error"]:
        text += f", {n['error']} ERROR (the suite broke, not the referee)"
    return text + (f", {n['skip']} skipped" if n["skip"] else "")
