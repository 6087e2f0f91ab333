"""``salvo tournament status`` as text: a terminal's worth of the night."""

from __future__ import annotations

import time
from typing import Any


def status_text(st: dict[str, Any]) -> str:
    t = st["tournament"]
    marks = (("PAUSED", t["paused"]), ("OVER", t["done"]), ("director not running", not t["running"]))
    flags = [f for f, on in marks if on]
    kind = "duels" if t["table_size"] == 2 else f"tables of {t['table_size']}"
    lines = [
        f"{t['format']}, {kind}: "
        f"round {t['round']} of {t['rounds']}, {t['games_played']} games played, {t['games_left']} left"
        + (f", leader {t['leader']}" if t["leader"] else "")
        + (f"  [{' | '.join(flags)}]" if flags else ""),
        "",
    ]
    for a in st["arenas"]:
        who = " vs ".join(a["teams"]) or "-"
        since = f", {int(time.time() - a['since'])}s since assigned" if a.get("since") else ""
        shooter = f" ({a['current']})" if a.get("current") else ""  # none once the game is over
        turn = f", turn {a['turn']}{shooter}" if a.get("turn") else ""
        lines.append(f"  {a['arena']:<12} {a['state']:<9} {who}{turn}{since}" + ("  PAUSED" if a.get("paused") else ""))
    if st["arenas"]:
        lines.append("")
    lines.append(f"{'#':>3}  {'team':<20} {'P':>3} {'W':>3} {'D':>3} {'L':>3} {'F':>3} {'pts':>4} {'BH':>4}")
    for r in st["standings"]:
        lines.append(
            f"{r['rank']:>3}  {r['team']:<20} {r['played']:>3} {r['wins']:>3} {r['draws']:>3} {r['losses']:>3} "
            f"{r['forfeits']:>3} {r['points']:>4} {r['buchholz']:>4}" + ("  withdrawn" if r["withdrawn"] else "")
        )
    late = [f"{x['team']} ({x['status']})" for x in st["late"]]
    if late:
        lines += ["", "late: " + ", ".join(late)]
    if st["pending"]:
        nxt = "; ".join(" vs ".join(p["teams"]) for p in st["pending"][:6])
        lines += ["", f"next: {nxt}" + (" ..." if len(st["pending"]) > 6 else "")]
    return "\n".join(lines)
