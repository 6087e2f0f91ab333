"""The report of ``salvo stress chaos`` and the loop that plays a
scenario's games, shared by the scenarios of :mod:`salvo.chaos` and
:mod:`salvo.tools.chaosfaults`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from salvo.net.mqtt import Broker
from salvo.tools.chaosdriver import KILLS, Fault, Options, Run, Stalled
from salvo.tools.chaosprocs import Restartable

#: (point, n) -> the fault to inject there, for one game
Plan = dict[tuple[str, int], str]


@dataclass
class Report:
    faults: dict[str, list[Fault]] = field(default_factory=dict)  # by scenario
    violations: list[str] = field(default_factory=list)  # each with the messages around it
    skipped: dict[str, str] = field(default_factory=dict)
    games: dict[str, int] = field(default_factory=dict)
    tolerated: list[str] = field(default_factory=list)  # verdicts a scenario documents as not a fault

    def add(self, scenario: str, run: Run) -> None:
        faults = run.close()
        self.faults.setdefault(scenario, []).extend(faults)
        self.games[scenario] = self.games.get(scenario, 0) + run.games
        log, t0 = run.watch.messages, run.watch.messages[0].at if run.watch.messages else 0.0
        self.tolerated += [f"[{scenario}] {v.kind}: {v.text}" for v in run.tolerated]
        for f in faults:
            for v in f.violations:
                lines = [f"[{scenario}] {f.label}: {v.kind}: {v.text}"]
                for i in range(max(0, v.at - 8), min(len(log), v.at + 3)):
                    m = log[i]
                    lines.append(f"  {'>>' if i == v.at else '  '} +{m.at - t0:8.3f}s {m.topic} {m.text[:110]}")
                self.violations.append("\n".join(lines))

    def rows(self) -> list[tuple[str, int, int, int]]:
        """(fault, runs, survived, lost): lost = something acknowledged never published."""
        rows: dict[str, list[int]] = {}
        for faults in self.faults.values():
            for f in faults:
                row = rows.setdefault(f.label, [0, 0, 0])
                row[0] += 1
                row[1] += not f.violations
                row[2] += any(v.kind == "lost" for v in f.violations)
        return [(label, *row) for label, row in rows.items()]  # type: ignore[misc]

    def notes(self) -> list[str]:
        """What the outcomes say, fault by fault (exit codes, messages, timings)."""
        out = []
        for faults in self.faults.values():
            by: dict[str, list[Fault]] = {}
            for f in faults:
                if f.outcome:
                    by.setdefault(f.label, []).append(f)
            for label, group in by.items():
                if {"journaled", "published"} <= group[0].outcome.keys():  # a kill in the window between them
                    window = sum(f.outcome["journaled"] and not f.outcome["published"] for f in group)
                    what = "the shot journaled, its hit" if label == KILLS["journal"] else "it journaled, its results"
                    out.append(f"{label}: stopped with {what} not out {window}/{len(group)}")
                elif "late_s" in group[0].outcome:
                    late = max(f.outcome["late_s"] for f in group)
                    counted = sum(not f.violations for f in group)
                    out.append(
                        f"{label}: salvos sent up to {late:.2f} s past the deadline counted {counted}/{len(group)}"
                    )
                else:
                    seen = sorted({", ".join(f"{k}={v}" for k, v in f.outcome.items()) for f in group})
                    out.append(f"{label}: " + " || ".join(s[:300] for s in seen[:3]))
        return out

    def text(self) -> str:
        width = max([len(r[0]) for r in self.rows()] + [10])
        lines = [f"{'fault':<{width}}  runs  survived  lost"]
        lines += [f"{label:<{width}}  {n:>4}  {ok:>8}  {lost:>4}" for label, n, ok, lost in self.rows()]
        lines.append("games: " + ", ".join(f"{s} {n}" for s, n in self.games.items()))
        lines += [f"skipped {s}: {why}" for s, why in self.skipped.items()]
        lines += self.notes()
        if self.tolerated:
            lines.append(f"tolerated (documented, not faults): {len(self.tolerated)}")
            lines += [f"  {t[:300]}" for t in self.tolerated]
        lines.append(f"violations: {len(self.violations)}")
        return "\n".join(lines + self.violations)


def play_games(
    o: Options,
    rep: Report,
    scenario: str,
    plan: Callable[[Run], Plan],
    inject: Callable[[Run, str], None],
    more: Callable[[int, int], bool],
    *,
    turn_timeout: float = 30.0,
    background: Callable[[Run, threading.Event], None] | None = None,
    broker: tuple[Broker, Restartable] | None = None,
    prepare: Callable[[Run], None] | None = None,
) -> None:
    """Games in one arena while ``more(games, faults)``; after a stall, on in a
    new arena (three at most)."""
    games = faults = 0
    for k in range(3):
        run = Run(o, scenario, k, turn_timeout, broker[0] if broker else None)
        run.inject, run.restartable = inject, broker[1] if broker else None
        stop, threads = threading.Event(), []
        try:
            if prepare:
                prepare(run)
            if (code := run.start()) is not None:
                raise Stalled(f"the referee exited with {code}: {run.ref.tail()}")
            if background:
                threads.append(threading.Thread(target=background, args=(run, stop), daemon=True))
                threads[0].start()
            while more(games + run.games, faults + len(run.faults)):
                run.at = plan(run)
                run.play_game()
            return
        except Stalled as exc:
            if not any(v.text == str(exc) for v in run.found):
                run.violation("stalled", str(exc))
        finally:
            stop.set()
            for th in threads:
                th.join(70)
            games, faults = games + run.games, faults + len(run.faults)
            rep.add(scenario, run)
