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
    Case("presence.game_id", "4", "/game/id is retained: the game's id as text, at least 64 bits"),
    Case("presence.version", "4", "(v2.1) /game/version is retained '2.1'"),
    Case("settings.timeouts", "5-7", "the referee's timeouts suit the suite (read from what it publishes)"),
    # joining
    Case("join.plain", "5", "a valid plain join is appended to /players/list and /players/count (retained)"),
    Case("join.deadline", "5", "each accepted join (re-)arms /game/deadline {phase: placement, at}"),
    Case("join.sealed", "5", "a join sealed to /game/pubkey is accepted"),
    Case("join.repeat", "5", "the same name and secret again is a no-op"),
    Case("join.taken", "5", "the same name with another secret is refused: code name_taken"),
    Case("join.invalid_names", "3", "names outside [A-Za-z0-9_-]{1,32} are refused (bad_name), never listed"),
    Case("join.full", "5", "a join beyond --max-players is refused: code lobby_full"),
    Case(
        "join.refusals",
        "5",
        "every refused join is reported on /game/errors with its request_id, never on /players/<name>/error",
    ),
    Case("join.wrong_game", "5", "(v2.1) a join naming another game than /game/id is refused: code wrong_game"),
    Case(
        "join.request_id_echo",
        "5",
        "(v2.1) an invalid request_id that is a string is echoed, cut to 64 characters, in a malformed refusal",
    ),
    # placing
    Case("place.approved", "5", "a valid placement publishes approved 'true' (retained)"),
    Case("place.wrong_secret", "5", "a placement sealed with another key is refused: code cannot_decrypt"),
    Case("place.malformed", "5", "an undecodable or malformed placement is refused: code malformed"),
    Case("place.unknown_ship", "5", "an unknown ship id is refused: code unknown_ship"),
    Case("place.off_board", "5", "a placement off the board is refused: code off_board"),
    Case("place.overlap", "5", "an overlapping placement is refused (overlap), naming no coordinates of the other"),
    Case("place.not_joined", "5", "a placement for a name that did not join is refused: code not_joined"),
    Case("place.approved_false", "5", "a ship with no valid placement stays approved 'false' (retained)"),
    Case("place.encodings", "5", "key Orientation, any letter case and {x, y} coordinates are accepted"),
    Case("place.move", "5", "placing an approved ship again moves it"),
    # starting
    Case("start.deadline_exclusion", "5", "at the deadline the complete fleets play; the others are told left_out"),
    Case("start.play_order_list", "5", "/players/list and /players/count are republished in play order"),
    Case("start.outside_lobby", "5", "joins (game_in_progress) and placements (not_in_lobby) outside the lobby"),
    Case("start.too_few", "5", "with fewer than two complete fleets at the deadline the lobby stays open"),
    Case(
        "start.squatters",
        "5",
        "names that joined and never placed are removed at the deadline (left_out): a full lobby frees up",
    ),
    Case("start.all_ready", "5", "the game starts as soon as every joined fleet is complete"),
    # turns
    Case("turn.announce", "6", "each turn publishes retained /game/turn {turn, player, shots}, then /game/current"),
    Case("turn.order", "6", "play goes round the play order (fleet-completion order)"),
    Case("turn.allowance", "6", "shots allowed = the player's ships afloat when the turn starts"),
    Case("turn.skip_defeated", "6", "defeated players are skipped"),
    # firing
    Case("fire.hit_topic", "6", "every accepted shot is published on /players/<target>/hit, not retained"),
    Case("fire.hit_payload", "6", "a hit is {x, y, turn, shot}, shot counting the salvo's accepted shots from 1"),
    Case("fire.hit_game", "6", "(v2.1) a hit carries its game: the /game/id of the game it was fired in"),
    Case("fire.hit_rule", "6", "a shot at a ship cell hits, also when the cell was hit before"),
    Case("fire.self", "6", "a player may fire at itself"),
    Case("fire.bad_json", "6", "a fire message that is not JSON is refused on /game/errors: code malformed"),
    Case("fire.bad_signature", "3", "a signature that opens under no player's key: /game/errors, bad_signature"),
    Case("fire.data_mismatch", "3", "a signature that does not match its data is refused: code bad_signature"),
    Case("fire.wrong_turn", "3", "a shot signed for another turn is refused: code wrong_turn"),
    Case("fire.wrong_target", "3", "a shot signed for another target than the topic's is refused: wrong_target"),
    Case("fire.wrong_game", "3", "a shot signed for another game id is refused: code wrong_game"),
    Case(
        "fire.names_shot",
        "6",
        "(v2.1) a fire refusal to its sender names its shot (signature prefix, cell); a public one neither",
    ),
    Case("fire.unbound", "6", "the v1 unbound fire data {x, y} is refused by default: code malformed"),
    Case("fire.off_board", "6", "shots off the board are refused: code off_board"),
    Case("fire.unknown_target", "6", "shots at a name not in the game are refused: code unknown_target"),
    Case("fire.defeated_target", "6", "shots at a defeated player are refused: code defeated_target"),
    Case(
        "fire.out_of_turn",
        "3,6",
        "another player's signed shot is refused on ITS OWN error topic (not_current_player)",
    ),
    Case("fire.replay", "3", "the signature of a refused shot, sent again when it would be valid: replayed"),
    Case("fire.redelivery", "3", "an accepted shot delivered again is ignored: no error, no second hit"),
    Case("fire.not_counted", "6", "refused fire messages do not count as shots"),
    Case("fire.outside_turn", "6", "a signed shot outside a turn is refused on the sender's topic: not_in_turn"),
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
    Case("over.reset", "4,7", "after --reset-after the game's retained topics are cleared, 'lobby', a new /game/id"),
    # robustness and privacy
    Case("robust.garbage", "8", "garbage on every inbound topic gets a reason and changes nothing"),
    Case("robust.continues", "8", "after garbage the game still plays correctly"),
    Case("robust.codes", "8", "every error report is {topic, error, code} with a code of the documented list"),
    Case("privacy.secrets", "5", "no secret is ever echoed on any topic"),
    Case("acl.private", "9", "another team cannot read a team's hit, error and approved topics"),
    Case("acl.join_topic", "9", "only the referee reads /game/request_participation"),
    Case("acl.anonymous", "9", "anonymous clients read the public topics and cannot write"),
    Case("prefix.contained", "2", "with an arena prefix, the referee publishes only under it"),
]

CASES: dict[str, Case] = {c.id: c for c in _CASES}
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(c.group for c in _CASES))
