"""Load, as `salvo stress` runs it (docs/reliability.md has the full-size
commands and figures): many arenas in one referee process, and a garbage
flood while a game runs. No timing is asserted, only correctness and a
sanity bound on memory."""

from __future__ import annotations

import pytest

from salvo.net.mqtt import Broker
from salvo.tools.stress import run_arenas, run_flood

from mosquitto import Mosquitto


@pytest.mark.long
def test_ten_arenas_of_four_players_in_one_referee(broker: Mosquitto) -> None:
    result = run_arenas(Broker.from_url(broker.url("referee")), arenas=10, players=4)
    print(f"\n{result}")
    assert result.problems == []
    assert result.games_completed == 10
    assert result.referee_peak_rss_mb < 400  # key derivation: one 64 MiB argon2id per core at most


def test_a_garbage_flood_does_not_stop_the_game(broker: Mosquitto) -> None:
    result = run_flood(Broker.from_url(broker.url("referee")), rate=10_000, seconds=3)
    print(f"\n{result}")
    assert result.game_completed and result.winner in ("p0", "p1")
    assert result.sent >= 10_000
    assert result.referee_peak_rss_mb < 300
