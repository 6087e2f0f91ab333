"""The figures of one bench run, and how they are judged against targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Results:
    #: figure -> (limit, comparison): what :meth:`verdicts` judges by
    targets: dict[str, tuple[float, str]] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def put(self, key: str, value: float, digits: int = 4) -> None:
        self.figures[key] = round(float(value), digits)

    def verdicts(self) -> dict[str, bool]:
        out = {}
        for key, (limit, op) in self.targets.items():
            if key in self.figures:
                v = self.figures[key]
                out[key] = v <= limit if op == "<=" else v >= limit
        return out

    def as_json(self) -> dict[str, Any]:
        return {**self.figures, "targets_met": self.verdicts(), "meta": self.meta}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]
