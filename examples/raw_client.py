"""A complete salvo client with nothing but paho-mqtt and PyNaCl.

It proves docs/protocol.md is enough on its own: no salvo import anywhere.

    python raw_client.py --name alice --secret s3cret --password MQTT_PASSWORD \\
        [--host localhost] [--port 1883] [--prefix demo]

Joins with a sealed request, places a random fleet, fires at random cells of
live opponents whenever /game/current names it, prints the winner and exits.
"""

import argparse
import base64
import json
import random
import threading

import paho.mqtt.client as mqtt
from nacl import encoding, hash, pwhash, secret
from nacl.public import PublicKey, SealedBox

FLEET = {"carrier": 5, "battleship": 4, "destroyer": 3, "submarine": 3, "patrolboat": 2}


def team_key(name, team_secret):
    salt = hash.blake2b(b"battleship-salvo/" + name.encode(), digest_size=16, encoder=encoding.RawEncoder)
    return pwhash.argon2id.kdf(32, team_secret.encode(), salt, opslimit=pwhash.argon2id.OPSLIMIT_INTERACTIVE,
                               memlimit=pwhash.argon2id.MEMLIMIT_INTERACTIVE)


def seal(key, text):
    return base64.b64encode(secret.SecretBox(key).encrypt(text.encode())).decode()


def random_fleet(rng):
    """Ship -> (x, y, orientation): ships in turn at random free spots."""
    taken, fleet = set(), {}
    for ship, length in FLEET.items():
        while True:
            x, y, o = rng.randrange(10), rng.randrange(10), rng.choice(["HORIZONTAL", "VERTICAL"])
            cells = {(x + i, y) if o == "HORIZONTAL" else (x, y + i) for i in range(length)}
            if all(cx < 10 and cy < 10 for cx, cy in cells) and not cells & taken:
                taken |= cells
                fleet[ship] = (x, y, o)
                break
    return fleet


class RawClient:
    def __init__(self, args):
        self.name, self.secret = args.name, args.secret
        self.root = f"/{args.prefix}" if args.prefix else ""
        self.key = team_key(self.name, self.secret)
        self.seen = {}  # topic -> latest payload (text)
        self.cond = threading.Condition()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.client.username_pw_set(args.username or self.name, args.password)
        self.client.on_connect = self.on_connect
        self.client.on_message = self.on_message
        self.client.connect(args.host, args.port)
        self.client.loop_start()

    def t(self, path):
        return self.root + path

    def on_connect(self, client, userdata, flags, reason_code, properties):
        # Public topics, plus everything addressed to us.
        client.subscribe([(self.t("/game/#"), 1), (self.t("/players/list"), 1),
                          (self.t("/players/+/defeated"), 1), (self.t(f"/players/{self.name}/#"), 1)])

    def on_message(self, client, userdata, msg):
        with self.cond:
            self.seen[msg.topic] = msg.payload.decode()
            if msg.topic.endswith("/error") or msg.topic.endswith("/errors"):
                print("referee says:", msg.payload.decode())
            self.cond.notify_all()

    def wait(self, predicate, timeout=120):
        with self.cond:
            if not self.cond.wait_for(predicate, timeout):
                raise TimeoutError("the referee did not answer in time")

    def get(self, path):
        return self.seen.get(self.t(path))

    def send(self, path, payload):
        self.client.publish(self.t(path), payload, qos=1)

    def join(self):
        self.wait(lambda: self.get("/game/state") == "lobby" and self.get("/game/pubkey"))
        request = json.dumps({"name": self.name, "secret": self.secret}).encode()
        pubkey = PublicKey(base64.b64decode(self.get("/game/pubkey")))
        self.send("/game/request_participation", base64.b64encode(SealedBox(pubkey).encrypt(request)).decode())
        # Accepted once our ships are listed as not yet approved.
        self.wait(lambda: self.get(f"/players/{self.name}/ships/carrier/approved") is not None)

    def place(self, rng):
        for ship, (x, y, o) in random_fleet(rng).items():
            placement = json.dumps({"coordinates": f"{x};{y}", "orientation": o})
            self.send(f"/players/{self.name}/ships/{ship}/place", seal(self.key, placement))
        self.wait(lambda: all(self.get(f"/players/{self.name}/ships/{s}/approved") == "true" for s in FLEET))

    def play(self, rng):
        untried = {}
        last_turn = 0
        def my_turn():
            # /game/turn names the player itself: no race with a stale /game/current.
            turn = json.loads(self.get("/game/turn") or "{}")
            return turn.get("player") == self.name and turn["turn"] > last_turn

        while True:
            self.wait(lambda: self.get("/game/state") == "over" or my_turn())
            if self.get("/game/state") == "over":
                return self.get("/game/winner")
            turn = json.loads(self.get("/game/turn"))
            last_turn = turn["turn"]
            players = json.loads(self.get("/players/list"))
            live = [p for p in players if p != self.name and self.get(f"/players/{p}/defeated") != "true"]
            for _ in range(turn["shots"]):
                target = rng.choice(live)
                cells = untried.setdefault(target, [])
                if not cells:  # a salvo can outnumber the cells left: sweep again
                    cells.extend((x, y) for x in range(10) for y in range(10))
                x, y = cells.pop(rng.randrange(len(cells)))
                data = {"x": x, "y": y, "turn": last_turn}
                self.send(f"/players/{target}/fire", json.dumps({"data": data, "signature": seal(self.key, json.dumps(data))}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--username", help="MQTT username (default: the team name)")
    parser.add_argument("--password", help="MQTT password")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    me = RawClient(args)
    me.join()
    me.place(rng)
    print("winner:", me.play(rng) or "nobody")
    me.client.disconnect()
    me.client.loop_stop()


if __name__ == "__main__":
    main()
