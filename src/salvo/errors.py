"""The two ways an inbound message is refused, as values with a wire reason.

* :class:`Malformed` - the message cannot be understood: too large, not UTF-8,
  not JSON, wrong shape or types, bad base64, undecryptable.
* :class:`Illegal` - the message was understood but breaks a rule: wrong turn,
  overlap, name taken, not in the lobby, replayed signature...

Both are exceptions so validation code can stop at the first problem, and
both are plain values once caught: :mod:`salvo.protocol` maps them to error
topics in one place. A rejected message never changes game state.
"""

from __future__ import annotations

from typing import ClassVar


class Rejection(Exception):
    """A refused message. ``reason`` is safe to publish: it never contains a
    secret or another player's ship coordinates."""

    kind: ClassVar[str] = "rejected"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason!r})"


class Malformed(Rejection):
    kind = "malformed"


class Illegal(Rejection):
    kind = "illegal"
