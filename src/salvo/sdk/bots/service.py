"""A bot that plays free play all evening (``salvo bot``): game after game in
one arena, on one connection, through what a night brings.

The connection itself rides out a broker that is down or restarts (the
client retries with back-off, :meth:`salvo.sdk.client.SalvoClient.start`);
what is left for this loop is the game side of an outage: a referee or a
broker that did not answer a join or a placement in time, or a lobby the
organisers closed. Each is logged and the bot carries on with the next
game. Closing the client ends it with ConnectionError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import GameRecord, LobbyClosed
from salvo.sdk.strategy import Strategy

log = logging.getLogger("salvo.bot")


def play_on(
    client: SalvoClient,
    strategy: Strategy,
    games: int | None = None,
    on_game: Callable[[GameRecord], None] | None = None,
) -> int:
    """Play ``games`` games (None: until the client is closed) in the
    client's arena; the number played. A refusal that will not pass
    (:class:`~salvo.sdk.outcomes.JoinRefused`, :class:`~salvo.sdk.outcomes.PlacementRefused`)
    is raised: the team's name, secret or fleet needs fixing."""
    played = 0

    def count(record: GameRecord) -> None:
        nonlocal played
        played += 1
        if on_game is not None:
            on_game(record)

    while games is None or played < games:
        try:
            client.play(strategy, games=None if games is None else games - played, on_game=count)
        except LobbyClosed as exc:  # a lobby closed, a game aborted: the next one comes
            log.warning("%s: %s; waiting for the next game", client.name, exc)
        except TimeoutError as exc:  # the referee or the broker did not answer in time
            log.warning("%s: %s; carrying on", client.name, exc)
    return played
