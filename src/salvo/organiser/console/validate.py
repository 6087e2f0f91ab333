"""A control request from the page, checked against :data:`ACTIONS` before
the director sees it: the action exists, its arguments are the ones it
takes, each of its kind. What is wrong is a :class:`ControlError` with a
code the page shows, as the director's own refusals are."""

from __future__ import annotations

from typing import Any

from salvo.organiser.tournament.controls import ACTIONS, ControlError

MAX_TEXT = 500  # a reason is a sentence, not a file
MAX_SECONDS = 3600


def _check(kind: str, name: str, value: Any) -> Any:
    if kind == "game":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ControlError("bad_arguments", f"{name} must be a game number (0 or more)")
        return value
    if kind == "seconds":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_SECONDS:
            raise ControlError("bad_arguments", f"{name} must be a number of seconds between 1 and {MAX_SECONDS}")
        return value
    if not isinstance(value, str):
        raise ControlError("bad_arguments", f"{name} must be text")
    if len(value) > MAX_TEXT:
        raise ControlError("bad_arguments", f"{name} is longer than {MAX_TEXT} characters")
    if kind in ("arena", "team") and not value.strip():
        raise ControlError("bad_arguments", f"{name} must name a{'n' if kind == 'arena' else ''} {kind}")
    return value


def parse_control(body: Any) -> tuple[str, dict[str, Any]]:
    """``{"action": name, "args": {...}}`` -> (name, checked args). A "text"
    argument (a reason) may be left out: the director decides whether it
    needs one; every other argument is required."""
    if not isinstance(body, dict):
        raise ControlError("bad_request", 'the body must be a JSON object {"action": ..., "args": {...}}')
    name = body.get("action")
    action = ACTIONS.get(name) if isinstance(name, str) else None
    if action is None:
        known = ", ".join(ACTIONS)
        raise ControlError("unknown_action", f"no action {name!r}; the actions are {known}")
    args = body.get("args", {})
    if not isinstance(args, dict):
        raise ControlError("bad_arguments", "args must be a JSON object")
    unknown = sorted(set(args) - set(action.args))
    if unknown:
        raise ControlError("bad_arguments", f"{action.name} takes no {', '.join(unknown)}")
    missing = [a for a, kind in action.args.items() if a not in args and kind != "text"]
    if missing:
        raise ControlError("bad_arguments", f"{action.name} needs {', '.join(missing)}")
    return action.name, {a: _check(action.args[a], a, v) for a, v in args.items()}
