"""`salvo bot` as a service, and what it stands on: the back-off a client
retries the broker with."""

from __future__ import annotations

from salvo.mqtt import Backoff

# -- the back-off -------------------------------------------------------------------------------


def test_the_back_off_doubles_from_1_s_to_30_s_jittered_and_starts_over() -> None:
    backoff = Backoff()
    firsts = set()
    for _ in range(200):  # (the jitter is random: many draws)
        waits = [backoff.next() for _ in range(8)]
        for wait, full in zip(waits, [1, 2, 4, 8, 16, 30, 30, 30], strict=True):
            assert full / 2 <= wait <= full
        firsts.add(waits[0])
        backoff.reset()  # a connection the broker accepted
    assert len(firsts) > 100  # jittered: bots that lost the same broker do not come back in step
