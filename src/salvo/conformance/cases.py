"""Every case of the conformance suite: an id, the spec section it checks,
and what must hold. Each MUST of the spec maps to at least one case."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    id: str
    section: str
    title: str

    @property
    def group(self) -> str:
        return self.id.split(".")[0]


_CASES = [
    # presence and keys
    Case("presence.server", "4", "/game/server is retained 'up'"),
    Case("presence.pubkey", "4", "/game/pubkey is a retained base64 X25519 public key"),
    Case("presence.lobby", "5", "/game/state is retained and the arena is an idle lobby"),
    Case("settings.timeouts", "5-7", "the referee's timeouts suit the suite (read from what it publishes)"),
    # joining
    Case("join.plain", "5", "a valid plain join is appended to /players/list and /players/count (retained)"),
    Case("join.deadline", "5", "each accepted join (re-)arms /game/deadline {phase: placement, at}"),
    Case("join.sealed", "5", "a join sealed to /game/pubkey is accepted"),
    Case("join.repeat", "5", "the same name and secret again is a no-op"),
    Case("join.taken", "5", "the same name with another secret is rejected ('name taken') on /players/<name>/error"),
    Case("join.invalid_names", "3", "names outside [A-Za-z0-9_-]{1,32} are rejected on /game/errors, never listed"),
    Case("join.full", "5", "a join beyond --max-players is rejected on the team's error topic"),
    # placing
    Case("place.approved", "5", "a valid placement publishes approved 'true' (retained)"),
    Case("place.wrong_secret", "5", "a placement sealed with another key is rejected on the ship's error topic"),
    Case("place.malformed", "5", "an undecodable or malformed placement is rejected"),
    Case("place.unknown_ship", "5", "an unknown ship id is rejected"),
    Case("place.off_board", "5", "a placement off the board is rejected"),
    Case("place.overlap", "5", "an overlapping placement is rejected, naming no coordinates of the other ship"),
    Case("place.not_joined", "5", "a placement for a name that did not join is rejected"),
    Case("place.approved_false", "5", "a ship with no valid placement stays approved 'false' (retained)"),
    Case("place.encodings", "5", "key Orientation, any letter case and {x, y} coordinates are accepted"),
    Case("place.move", "5", "placing an approved ship again moves it"),
    # starting
    Case("start.deadline_exclusion", "5", "at the deadline the complete fleets play; the others are told, left out"),
    Case("start.play_order_list", "5", "/players/list and /players/count are republished in play order"),
    Case("start.outside_lobby", "5", "joins ('game in progress') and placements outside the lobby are rejected"),
    Case("start.too_few", "5", "with fewer than two complete fleets at the deadline the lobby stays open"),
    Case("start.all_ready", "5", "the game starts as soon as every joined fleet is complete"),
    # turns
    Case("turn.announce", "6", "each turn publishes retained /game/turn {turn, player, shots}, then /game/current"),
    Case("turn.order", "6", "play goes round the play order (fleet-completion order)"),
    Case("turn.allowance", "6", "shots allowed = the player's ships afloat when the turn starts"),
    Case("turn.skip_defeated", "6", "defeated players are skipped"),
    # firing
    Case("fire.hit_topic", "6", "every accepted shot publishes {x, y} on /players/<target>/hit, not retained"),
    Case("fire.hit_rule", "6", "a shot at a ship cell hits, also when the cell was hit before"),
    Case("fire.self", "6", "a player may fire at itself"),
    Case("fire.bad_json", "6", "a fire message that is not JSON is rejected on /players/<current>/error"),
    Case("fire.bad_signature", "3", "a message not signed with the current player's key is rejected"),
    Case("fire.data_mismatch", "3", "a signature that does not match data is rejected"),
    Case("fire.replay", "3", "a replayed signature is rejected"),
    Case("fire.turn_field", "6", "a message for another turn is rejected, the current turn accepted"),
    Case("fire.off_board", "6", "shots off the board are rejected"),
    Case("fire.unknown_target", "6", "shots at a name not in the game are rejected"),
    Case("fire.defeated_target", "6", "shots at a defeated player are rejected"),
    Case("fire.out_of_turn", "6", "a player who is not current cannot fire"),
    Case("fire.not_counted", "6", "rejected fire messages do not count as shots"),
    Case("fire.outside_turn", "6", "fire outside a turn is rejected"),
    # the end of a salvo
    Case("salvo.counts", "6", "/game/hits and retained /game/salvo give the salvo's hits and shots"),
    Case("salvo.sinks_at_end", "6", "sinks are announced only when the salvo ends"),
    Case("salvo.order", "6", "salvo end order: hits, salvo, sunk..., defeated..., then the next turn or the end"),
    # timeouts
    Case("timeout.partial", "6", "a turn that times out ends the salvo with the shots fired so far"),
    Case("timeout.drop", "6", "timed-out turns in a row without a shot drop the player (defeated, reason timeout)"),
    # the end
    Case("over.winner", "7", "the winner is retained on /game/winner and /game/state becomes 'over'"),
    Case("over.summary", "7", "/game/stats/summary: winner, turns, shots, hits, duration_s, termination"),
    Case("over.players", "7", "/game/stats/players/<name> for every participant, with the spec's fields"),
    Case("over.reset", "7", "after --reset-after every retained topic of the game is cleared, state 'lobby'"),
    # robustness and privacy
    Case("robust.garbage", "8", "garbage on every inbound topic gets a reason and changes nothing"),
    Case("robust.continues", "8", "after garbage the game still plays correctly"),
    Case("privacy.secrets", "5", "no secret is ever echoed on any topic"),
    Case("acl.private", "9", "another team cannot read a team's hit, error and approved topics"),
    Case("acl.join_topic", "9", "only the referee reads /game/request_participation"),
    Case("acl.anonymous", "9", "anonymous clients read the public topics and cannot write"),
    Case("prefix.contained", "2", "with an arena prefix, the referee publishes only under it"),
]

CASES: dict[str, Case] = {c.id: c for c in _CASES}
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(c.group for c in _CASES))
