"""Why an inbound message was refused, as values: a machine ``code`` from a
fixed list (protocol v2 section 8) and a readable ``reason``.

Clients branch on the code, never on the prose; the reason is for people.
Both are exceptions so that validation can stop at the first problem, and
plain values once caught: :mod:`salvo.arena.arena` maps them to error topics in
one place. A rejected message never changes game state (the one trace an
authentic but rejected fire leaves is its spent signature nonce).

Two families, told apart by type, not by the text:

* :class:`Malformed` - the message cannot be understood: too large, not
  UTF-8, not JSON, wrong shape or types, bad base64, a bad name level.
* :class:`Illegal` - understood, but against the rules or not from whom it
  must be: wrong turn, overlap, name taken, replayed signature...
"""

from __future__ import annotations

import enum
from typing import ClassVar


class Code(enum.StrEnum):
    """Every error code the referee publishes (docs/protocol.md section 8)."""

    # the message itself
    MALFORMED = "malformed"  # not understood: JSON, shape, types, base64
    TOO_LARGE = "too_large"  # payload above 4096 bytes, rejected unread
    BAD_NAME = "bad_name"  # a team name (topic level) outside [A-Za-z0-9_-]{1,32}
    # signatures and their binding
    BAD_SIGNATURE = "bad_signature"  # opens under no player's key, or does not match its data
    REPLAYED = "replayed"  # this signature's nonce was seen before in this game
    WRONG_TURN = "wrong_turn"  # signed for another turn
    WRONG_TARGET = "wrong_target"  # signed for another target than the topic's
    WRONG_GAME = "wrong_game"  # signed for another game (/game/id)
    # firing
    NOT_CURRENT_PLAYER = "not_current_player"
    OFF_BOARD = "off_board"  # a shot or a ship outside the 10x10 board
    UNKNOWN_TARGET = "unknown_target"
    DEFEATED_TARGET = "defeated_target"
    NOT_IN_TURN = "not_in_turn"
    # joining
    NAME_TAKEN = "name_taken"
    LOBBY_FULL = "lobby_full"
    GAME_IN_PROGRESS = "game_in_progress"
    NOT_REGISTERED = "not_registered"
    WRONG_SECRET = "wrong_secret"
    BUSY = "busy"  # too many joins being checked: try again in a moment
    SEALED_ONLY = "sealed_only"  # this referee takes sealed joins only
    # placing
    UNKNOWN_SHIP = "unknown_ship"
    OVERLAP = "overlap"
    NOT_JOINED = "not_joined"
    NOT_IN_LOBBY = "not_in_lobby"
    CANNOT_DECRYPT = "cannot_decrypt"
    TOO_MANY = "too_many"  # more placements than a game allows
    # told by the referee on its own
    LEFT_OUT = "left_out"  # fleet incomplete at the placement deadline: removed
    LOBBY_CLOSED = "lobby_closed"  # the organiser sent the lobby away
    GAME_ABORTED = "game_aborted"  # the organiser ended the game without a result


class Rejection(Exception):
    """A refused message. ``reason`` is safe to publish: it never contains a
    secret or another player's ship coordinates."""

    family: ClassVar[str] = "rejected"

    def __init__(self, code: Code, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}, {self.reason!r})"


class Malformed(Rejection):
    family = "malformed"

    def __init__(self, reason: str, code: Code = Code.MALFORMED) -> None:
        super().__init__(code, reason)


class Illegal(Rejection):
    family = "illegal"
