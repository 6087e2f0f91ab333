"""What the suite concludes about a case, and how it reads what the referee
published without tripping over it.

A case FAILs only for the referee's fault: a broken rule (:class:`CaseFailed`)
or no answer in time (:class:`~salvo.net.watch.NoReply`). Anything
else raised while judging is a bug of the suite itself and is reported as an
ERROR, never as a failure of the referee. So every read of a referee payload
goes through the helpers here, which turn a payload of the wrong shape into
a :class:`CaseFailed` instead of a ``KeyError`` or ``JSONDecodeError``.
"""

from __future__ import annotations

import json
import string
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from salvo.net.watch import Msg, NoReply
from salvo.tools.conformance.cases import Case

__all__ = [
    "CODES",
    "Abort",
    "CaseFailed",
    "Enough",
    "NoReply",
    "Result",
    "SuiteBug",
    "error_report",
    "expect",
    "field_is",
    "id_bits",
    "json_or_none",
    "obj",
    "parsed",
]

#: The error codes of the protocol (spec section 8; the referee's own
#: protocol document lists the same): every error report must carry one.
#: The suite keeps its own copy so that it depends on no referee's code.
CODES: Final = frozenset(
    {
        "malformed",
        "too_large",
        "bad_name",
        "bad_signature",
        "replayed",
        "wrong_turn",
        "wrong_target",
        "wrong_game",
        "not_current_player",
        "off_board",
        "unknown_target",
        "defeated_target",
        "not_in_turn",
        "name_taken",
        "lobby_full",
        "game_in_progress",
        "not_registered",
        "wrong_secret",
        "busy",
        "sealed_only",
        "unknown_ship",
        "overlap",
        "not_joined",
        "not_in_lobby",
        "cannot_decrypt",
        "too_many",
        "left_out",
        "lobby_closed",
        "game_aborted",
    }
)

_HERE = Path(__file__).resolve().parent


class CaseFailed(Exception):
    """The referee broke the rule a case checks."""


class Abort(Exception):
    """A step the rest of a game depends on failed (the referee's fault)."""


class Enough(Exception):
    """Every selected case has its result: the games may stop here."""


class SuiteBug(Exception):
    """The suite itself broke (not the referee): nothing more is judged."""

    def __init__(self, case_id: str | None, error: BaseException) -> None:
        self.case_id, self.error = case_id, error
        super().__init__(describe_bug(error))


def describe_bug(exc: BaseException) -> str:
    """One line: the exception and the suite's own line that raised it."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve().parent == _HERE]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    blame = "the broker or the network" if isinstance(exc, OSError) else "a bug of the conformance suite"
    return f"suite error {type(exc).__name__}: {exc}{where} ({blame}, not the referee)"


@dataclass
class Result:
    case: Case
    status: str  # "pass" | "fail" | "skip" | "error" (the suite broke)
    detail: str = ""

    def line(self) -> str:
        mark = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}[self.status]
        text = f"{mark:<5} §{self.case.section:<4} {self.case.id:<26} {self.case.title}"
        return text + (f"\n      -> {self.detail}" if self.detail and self.status != "pass" else "")


def expect(cond: object, message: str) -> None:
    if not cond:
        raise CaseFailed(message)


# -- reading what the referee published ------------------------------------------------


def json_or_none(payload: bytes) -> Any:
    """For predicates: the JSON value, or None when it is not JSON."""
    try:
        return json.loads(payload)
    except ValueError:
        return None


def parsed(msg: Msg, what: str = "") -> Any:
    try:
        return json.loads(msg.payload)
    except ValueError:
        raise CaseFailed(f"{what or msg.topic} is not JSON: {msg.text[:120]!r}") from None


def obj(msg: Msg, what: str = "", fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON object with at least ``fields``, or CaseFailed."""
    value = parsed(msg, what)
    expect(isinstance(value, dict), f"{what or msg.topic} is not a JSON object: {msg.text[:120]!r}")
    missing = [f for f in fields if f not in value]
    expect(not missing, f"{what or msg.topic} lacks {missing}: {msg.text[:120]!r}")
    return dict(value)


def error_report(msg: Msg) -> dict[str, Any]:
    """An error report (v2 section 8): ``{"topic", "error", "code"}`` with a
    readable ``error`` and a string ``code`` (whether the code is one of the
    list is the case ``robust.codes``)."""
    report = obj(msg, f"error report on {msg.topic}", ("topic", "error", "code"))
    expect(
        isinstance(report["topic"], str) and isinstance(report["error"], str) and report["error"],
        f"{msg.topic}: 'topic' and a readable 'error' must be strings: {msg.text[:160]!r}",
    )
    expect(isinstance(report["code"], str), f"{msg.topic}: 'code' must be a string: {msg.text[:160]!r}")
    return report


def field_is(topic: str, key: str, value: object) -> Callable[[Msg], bool]:
    """A message on ``topic`` whose JSON object has ``key`` == ``value``."""

    def pred(m: Msg) -> bool:
        if m.topic != topic or not m.payload:
            return False
        v = json_or_none(m.payload)
        return isinstance(v, dict) and v.get(key) == value and type(v.get(key)) is type(value)

    return pred


_HEX = set(string.hexdigits)
_B64 = set(string.ascii_letters + string.digits + "+/=_-")


def id_bits(text: str) -> float:
    """How many random bits a text id can hold at most, judged by its
    alphabet: decimal 3.3 a character, hex 4 (hyphens of a UUID aside),
    base64 6, anything else 6."""
    chars = set(text)
    if chars <= set(string.digits):
        return len(text) * 3.32
    if chars <= _HEX | {"-"}:
        return sum(c in _HEX for c in text) * 4.0
    return len(text.rstrip("=")) * 6.0 if chars <= _B64 else len(text) * 6.0
