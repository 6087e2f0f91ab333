"""Strict JSON for untrusted payloads, and JSON-value equality.

Python's ``json`` module is lenient where a referee must not be: it accepts
``NaN``/``Infinity``, keeps the last of duplicate keys (two parsers could then
disagree on what was signed) and overflows the stack on deep nesting. Here all
of these are :class:`~salvo.spec.errors.Malformed`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from salvo.spec.errors import Code, Malformed

MAX_PAYLOAD: Final = 4096
MAX_DEPTH: Final = 32


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise Malformed("invalid JSON: duplicate key in object")
    return obj


def _no_constants(name: str) -> Any:
    raise Malformed(f"invalid JSON: {name} is not a JSON number")


def _depth_ok(raw: str) -> bool:
    # A cheap upper bound on nesting that ignores brackets inside strings
    # conservatively: only when it says "too deep" do we look closer.
    if raw.count("[") + raw.count("{") <= MAX_DEPTH:
        return True
    depth = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def decode_text(payload: bytes, what: str = "payload") -> str:
    if len(payload) > MAX_PAYLOAD:
        raise Malformed(f"{what} too large: {len(payload)} bytes, limit {MAX_PAYLOAD}", Code.TOO_LARGE)
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"{what} is not UTF-8") from None


#: json.loads with hooks builds a decoder per call; one shared is the same
#: parser (decode keeps no state between calls) without that cost per message.
_DECODER: Final = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


#: A \\uD800-\\uDFFF escape: JSON lets one stand alone, Unicode text cannot hold it.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def loads(payload: bytes | str, what: str = "payload") -> Any:
    """Parse one JSON value from untrusted bytes, or raise Malformed."""
    raw = decode_text(payload, what) if isinstance(payload, bytes) else payload
    if not _depth_ok(raw):
        raise Malformed(f"invalid JSON: {what} nested deeper than {MAX_DEPTH}")
    try:
        value = _DECODER.decode(raw)
    except Malformed:
        raise
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "unparsable"
        raise Malformed(f"invalid JSON in {what}: {detail}") from None
    # A lone surrogate (an escape without its pair) parses, but is no text:
    # encoding it again fails. Looked for only when an escape could make one.
    if "\\u" in raw and _SURROGATE_ESCAPE.search(raw) and not _encodable(value):
        raise Malformed(f"invalid JSON in {what}: a \\u escape of half a surrogate pair")
    return value


def _encodable(value: Any) -> bool:
    """True when every string in ``value`` (keys included) is valid Unicode."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return True


#: json.dumps with any option builds an encoder per call (2 us, more than the
#: encoding of a small value); the encoder keeps no state between calls.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON, the form the referee publishes."""
    return _ENCODER.encode(value)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two parsed JSON values as JSON values.

    Unlike ``==`` this keeps ``true`` apart from ``1`` (Python's ``True == 1``);
    key order never matters; ``1`` and ``1.0`` are the same JSON number.
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


#: Inbound topics echoed in error reports are cut to this length: a topic may
#: be 64 KiB long and the report must stay small.
MAX_TOPIC_ECHO: Final = 256


#: (v2.1) A refused shot's ``signature`` is echoed cut to this many characters.
SIGNATURE_ECHO: Final = 16


def error_report(
    topic: str,
    reason: str,
    code: str,
    request_id: str | None = None,
    signature: str | None = None,
    shot: tuple[str, int, int] | None = None,
) -> str:
    """The payload of every error topic: ``{"topic", "error", "code"}``, plus
    ``request_id`` when a join carried one, and (v2.1) for a refused fire
    message the start of its ``signature`` and its ``shot`` (target, x, y)."""
    report: dict[str, object] = {"topic": topic[:MAX_TOPIC_ECHO], "error": reason, "code": code}
    if request_id is not None:
        report["request_id"] = request_id
    if signature is not None:
        report["signature"] = signature[:SIGNATURE_ECHO]
    if shot is not None:
        report["shot"] = {"target": shot[0], "x": shot[1], "y": shot[2]}
    return dumps(report)
