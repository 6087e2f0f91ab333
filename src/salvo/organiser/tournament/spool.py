"""Controls from the command line: ``salvo tournament pause`` and friends
append a request (one JSON line) to ``<state>.requests`` next to the state
file; the running director applies it between steps and appends the answer
to ``<state>.replies``. Whoever may write the state directory may control
the tournament, the same trust as editing its state (`docker compose run
--rm salvo tournament ...`, which mounts the same data/, or the organiser's
own account natively).
Requests the director has not answered yet are applied when it next runs."""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from salvo.organiser.tournament.controls import ControlError
from salvo.organiser.tournament.steps import Step

if TYPE_CHECKING:
    from salvo.organiser.tournament.director import Director

log = logging.getLogger("salvo.organiser.tournament")


def paths(state: Path) -> tuple[Path, Path]:
    return state.with_name(state.name + ".requests"), state.with_name(state.name + ".replies")


def _append(path: Path, body: dict[str, Any]) -> None:
    line = (json.dumps(body, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one write of one line: appends do not interleave
        os.fsync(fd)
    finally:
        os.close(fd)


def _lines(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Whole JSON lines from ``offset`` on, and where the next read starts."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for raw in data[:end].splitlines():
        try:
            body = json.loads(raw)
        except ValueError:
            continue
        if isinstance(body, dict):
            out.append(body)
    return out, offset + end


def send(state: Path, action: str, args: dict[str, Any], by: str) -> str:
    rid = uuid.uuid4().hex
    requests, _ = paths(state)
    _append(requests, {"id": rid, "action": action, "args": args, "by": by, "at": round(time.time(), 3)})
    return rid


def reply(state: Path, rid: str, timeout: float, poll: float = 0.1) -> dict[str, Any] | None:
    """The director's answer to request ``rid``, or None after ``timeout``."""
    _, replies = paths(state)
    end = time.monotonic() + timeout
    while True:
        for body in _lines(replies)[0]:
            if body.get("id") == rid:
                return body
        if time.monotonic() >= end:
            return None
        time.sleep(poll)  # a file has no change notification worth the dependency


class Spool:
    """The director's side: answers every request not answered yet."""

    def __init__(self, state: Path) -> None:
        self.requests, self.replies = paths(state)
        self._offset = 0
        self._answered = {b.get("id") for b in _lines(self.replies)[0]}
        self._size = -1

    def applied(self, d: Director) -> None:
        """Requests whose action is in the audit are done, answered or not (a
        crash between the state's save and the reply must not apply one twice)."""
        self._answered |= {a.get("request") for a in d.state.audit}

    def serve(self, d: Director) -> Step[None]:
        """Answer the requests not answered yet (a step: a control may wait for the referee)."""
        try:
            size = self.requests.stat().st_size
        except FileNotFoundError:
            return
        if size == self._size:
            return
        self._size = size
        bodies, self._offset = _lines(self.requests, self._offset)
        for body in bodies:
            rid = body.get("id")
            if not isinstance(rid, str) or rid in self._answered:
                continue
            self._answered.add(rid)
            reply = yield from answer(d, body)
            # Once the state that holds the control is on disk (a crash before
            # applies it again at the restart), by the director's worker.
            d.keeper.after_saved(functools.partial(d.keeper.run, functools.partial(self._reply, reply)))

    def _reply(self, body: dict[str, Any]) -> None:
        try:
            _append(self.replies, body)
        except OSError:  # the state holds the control: applied, not told
            log.exception("the reply to control request %s could not be written", body.get("id"))


def answer(d: Director, body: dict[str, Any]) -> Step[dict[str, Any]]:
    from salvo.organiser.tournament import actions

    rid, action = body.get("id"), str(body.get("action"))
    args = body.get("args") if isinstance(body.get("args"), dict) else {}
    assert isinstance(args, dict)
    if action == "status":
        return {"id": rid, "ok": True, "status": d.status()}
    try:
        entry = yield from actions.applying(d, action, args, str(body.get("by") or "cli"), request=str(rid))
    except ControlError as err:
        return {"id": rid, "ok": False, **err.as_json()}
    except Exception as err:  # a damaged line must not stop the night (and every restart after it)
        log.exception("control request %s failed", rid)
        return {"id": rid, "ok": False, "code": "internal", "reason": f"{action} failed: {err!r}"}
    return {"id": rid, "ok": True, "entry": entry}
