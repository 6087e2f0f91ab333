"""A complete bot in 20 lines: python minimal_bot.py NAME SECRET [BROKER_URL [PREFIX [CA_FILE]]]

For TLS give mqtts://HOST:8883 and the organiser's ca.crt as CA_FILE. The SDK
does the protocol: sealed joins with a request_id, shots signed for their
target, turn and game, duplicate hits dropped; refusals raise with a .code.
"""

import random
import sys

from salvo.client import SalvoClient
from salvo.rules import random_fleet

name, secret = sys.argv[1:3]
broker, prefix, ca_file = [*sys.argv[3:], None, None, None][:3]
rng = random.Random()
with SalvoClient(name, secret, broker or "mqtt://localhost:1883", prefix=prefix or "", ca_file=ca_file) as me:
    me.join()
    me.place_fleet(random_fleet(rng))
    untried: dict[str, list[tuple[int, int]]] = {}  # cells not yet fired at, per opponent
    while (turn := me.wait_my_turn()) is not None:
        shots = []
        for _ in range(turn.shots):
            target = rng.choice(me.view.opponents())
            cells = untried.setdefault(target, [])
            cells += [] if cells else [(x, y) for x in range(10) for y in range(10)]  # (re)fill
            shots.append((target, *cells.pop(rng.randrange(len(cells)))))
        me.fire_salvo(shots)
    print(me.wait_game_over().line())
