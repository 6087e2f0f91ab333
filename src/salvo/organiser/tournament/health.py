"""What the director tells of itself and of each arena: the healthcheck
(``GET /health`` on the console's server, for a container) and the arenas'
part of the status, from what its watcher last heard. Read on the loop
(status, through Director.on_loop), or from any thread without waiting for
the loop (health: a stuck loop is reported, not joined)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from salvo.spec.topics import Topics

if TYPE_CHECKING:
    from salvo.organiser.tournament.director import Director

#: The loop comes round at least twice a second; this long without, it is
#: stuck (what /health reports).
LOOP_STALE_S = 10.0


def health(d: Director) -> dict[str, Any]:
    """For a container's healthcheck (``GET /health`` on the console's
    server): ``ok`` when the loop came round within LOOP_STALE_S and every
    arena of its referee is connected to the broker; ``reason`` says what
    is wrong otherwise. Nothing secret; never waits for the loop (its
    lock), so a stuck loop is reported, not joined."""
    since = time.monotonic() - d.ticked
    arenas = d.referee.arenas_up() if d.referee is not None else {}
    wrong = []
    if d.stop.is_set():
        wrong.append("the director is stopping")
    elif since > LOOP_STALE_S:
        wrong.append(f"the director's loop has not come round for {since:.0f} s")
    down = [a or "(default)" for a, up in arenas.items() if not up]
    if down:
        wrong.append(f"not connected to the broker: {', '.join(down)}")
    body: dict[str, Any] = {
        "ok": not wrong,
        "loop_s": round(since, 1),
        "arenas": {a or "(default)": "up" if up else "down" for a, up in arenas.items()},
    }
    if wrong:
        body["reason"] = "; ".join(wrong)
    return body


def arena_view(d: Director, arena: str) -> dict[str, Any]:
    t = Topics(arena)
    live = d.state.live.get(arena)
    fixture = d.state.fixtures[live.fixture] if live else None
    server = d.value(t.server) if t.server in d.filters else None
    view: dict[str, Any] = {
        "arena": arena,
        "state": d.arena_state(arena) if server != b"down" else "down",
        "round": fixture.round if fixture else None,
        "teams": list(fixture.teams) if fixture else [],
        "since": live.assigned_at if live else None,
        "paused": False,
        "turn": None,
        "current": (d.value(t.current) or b"").decode() or None,
    }
    for topic, key in ((t.deadline, "paused"), (t.turn, "turn")):
        try:
            body = json.loads(d.value(topic) or b"null")
        except ValueError:
            continue
        if isinstance(body, dict):
            view[key] = bool(body.get("paused")) if key == "paused" else body.get("turn")
    return view
