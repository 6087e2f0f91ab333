"""Who an arena's games are: each game's id and the draw of its first player.

* Every game has an id (``/game/id``), derived from the arena's secret id
  key and the game number: unpredictable without the key, the same on a
  replay. A fire signs it, with its target and turn (v2 binding).
* The first player is drawn from a RNG seeded by the game's *draw*: a keyed
  BLAKE2b of the game number under the arena's secret id key when the seed
  is :data:`KEYED_DRAW` (the referee's default: nothing a team can be handed
  predicts a later game's first player), else ``(seed, game number)`` (a
  seed given for tests and simulations).

A replay of an exported game carries its id (and, in a KEYED_DRAW arena, its
draw) but not the arena's key: those are given, not derived.
"""

from __future__ import annotations

import hashlib

#: The seed of an arena whose first players are drawn from its secret id key.
KEYED_DRAW = "keyed"


def draw_for(id_key: bytes, game_no: int) -> str:
    """Game ``game_no``'s draw of the first player in a KEYED_DRAW arena: one
    way, so a game's draw (in its export) says nothing of another's."""
    return hashlib.blake2b(f"draw/{game_no}".encode(), key=id_key, digest_size=16).hexdigest()


def game_id_for(id_key: bytes, game_no: int) -> str:
    """Game ``game_no``'s id in an arena whose id key is ``id_key``: 64 bits
    of a keyed BLAKE2b of the number (unpredictable without the key)."""
    return hashlib.blake2b(str(game_no).encode(), key=id_key, digest_size=8).hexdigest()


class Identity:
    """An arena's seed and id key, and what a replay was given for one game."""

    def __init__(
        self,
        seed: int | str,
        id_key: bytes | None,
        *,
        game_no: int,
        game_id: str | None = None,
        draw: str | None = None,
    ) -> None:
        self.seed = seed
        #: The arena's secret for game ids: random and kept in the state file
        #: by the referee; derived from the seed here when none is given
        #: (predictable: for tests and simulations only).
        self.id_key = id_key if id_key is not None else hashlib.blake2b(str(seed).encode()).digest()[:32]
        #: game_no's id as given, not derived (a replay of an exported game,
        #: which carries its id but not the arena's key)
        self._given_id = (game_no, game_id) if game_id is not None else None
        #: game_no's draw as given (a replay of an exported game of a KEYED_DRAW arena)
        self._given_draw = (game_no, draw) if draw is not None else None

    def game_id(self, game_no: int) -> str:
        if self._given_id is not None and self._given_id[0] == game_no:
            return self._given_id[1]
        return game_id_for(self.id_key, game_no)

    def draw(self, game_no: int) -> str:
        """What game ``game_no``'s first player is drawn from."""
        if self._given_draw is not None and self._given_draw[0] == game_no:
            return self._given_draw[1]
        if self.seed == KEYED_DRAW:
            return draw_for(self.id_key, game_no)
        return f"{self.seed}/{game_no}"
