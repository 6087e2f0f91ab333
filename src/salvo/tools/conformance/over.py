"""The end of game 1 and its reset (spec section 7): winner, stats, and a
clean lobby with a new game id."""

from __future__ import annotations

from salvo.tools.conformance.lobby import Game1
from salvo.tools.conformance.model import Model
from salvo.tools.conformance.session import Session
from salvo.tools.conformance.verdict import CaseFailed, expect, json_or_none

SUMMARY_FIELDS = {"winner", "turns", "shots", "hits", "duration_s", "termination"}
PLAYER_FIELDS = {"place", "shots", "hits", "accuracy", "ships_sunk", "ships_lost", "defeated_in_turn", "reason"}


def retained_json(snap: dict[str, str], topic: str) -> dict[str, object]:
    value = json_or_none(snap.get(topic, "").encode())
    if not isinstance(value, dict):
        raise CaseFailed(f"{topic} is not a retained JSON object: {snap.get(topic)!r}")
    return value


def check_over(s: Session, g: Game1, model: Model, winner: str) -> None:
    t, obs = s.t, s.obs
    over_at = obs.wait_for(t.state, "over", after=g.start)
    with s.case("over.winner"):
        expect(obs.latest(t.winner) is not None, "no /game/winner")
        snap = s.snapshot([t.winner, t.state])
        expect(snap.get(t.winner) == winner, f"/game/winner should be {winner!r} (retained): {snap}")
        expect(snap.get(t.state) == "over", f"/game/state should be 'over' (retained): {snap}")
    total_turns = max(model.defeated.values(), default=0)
    with s.case("over.summary"):
        summary = retained_json(s.snapshot([t.stats_summary]), t.stats_summary)
        expect(set(summary) >= SUMMARY_FIELDS, f"fields: {sorted(summary)}")
        expect(summary["winner"] == winner, f"winner {summary['winner']!r}")
        expect(summary["turns"] == total_turns, f"turns {summary['turns']} != {total_turns}")
        shots, hits = sum(model.shots.values()), sum(model.hits.values())
        expect(summary["shots"] == shots, f"shots {summary['shots']} != {shots}")
        expect(summary["hits"] == hits, f"hits {summary['hits']} != {hits}")
        duration = summary["duration_s"]
        expect(isinstance(duration, (int, float)) and duration >= 0, f"duration_s {duration!r}")
        expect(isinstance(summary["termination"], str) and summary["termination"], "termination")
    with s.case("over.players"):
        snap = s.snapshot([t.stats_player("+")])
        for name in model.order:
            st = retained_json(snap, t.stats_player(name))
            expect(set(st) >= PLAYER_FIELDS, f"{name}: fields {sorted(st)}")
            expect(st["shots"] == model.shots.get(name, 0), f"{name}: shots {st['shots']}")
            expect(st["hits"] == model.hits.get(name, 0), f"{name}: hits {st['hits']}")
            expect(st["ships_lost"] == len(model.sunk[name]), f"{name}: ships_lost {st['ships_lost']}")
            expect(st["defeated_in_turn"] == model.defeated.get(name), f"{name}: defeated_in_turn")
            expect((st["place"] == 1) == (name == winner), f"{name}: place {st['place']}")
            expect(st["reason"] != "timeout", f"{name} was sunk, not timed out")
    with s.case("over.reset"):
        lobby = s.wait_state("lobby", s.index(over_at), timeout=30)
        s.learned["reset"] = lobby.at - over_at.at
        snap = s.retained_under_arena()
        # the game's successor and the referee's own presence (server, pubkey,
        # lease: docs/protocol.md section 4) outlive a game
        kept = (t.state, t.server, t.pubkey, t.lease, t.game_id, t.version)
        left = {k: v for k, v in snap.items() if k not in kept and not s.is_inbound_topic(k)}
        expect(not left, f"still retained after the reset: {sorted(left)[:6]}")
        new_id = snap.get(t.game_id)
        expect(new_id, "no retained /game/id in the new lobby")
        expect(new_id != g.game_id, f"/game/id is still {g.game_id!r} after the reset: every game needs a new one")
