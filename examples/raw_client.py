"""A complete salvo client (protocol v2) with nothing but paho-mqtt and PyNaCl.

It proves docs/protocol.md is enough on its own: no salvo import anywhere.

    python raw_client.py --name alice --secret s3cret --password MQTT_PASSWORD \\
        [--host localhost] [--port 1883] [--prefix demo] [--ca-file ca.crt]

With --ca-file it speaks MQTT over TLS (port 8883 unless --port) and trusts
only that CA: the organiser's ca.crt. Joins with a sealed request carrying a
random request_id, places a random fleet, fires shots bound to their target,
turn and game at random cells of live opponents whenever /game/turn names it,
prints its stats and the winner, and exits. Exit status 1 when the referee
refuses the join.
"""

import argparse
import base64
import json
import random
import threading

import paho.mqtt.client as mqtt
from nacl import encoding, hash, pwhash, secret, utils
from nacl.public import PublicKey, SealedBox

FLEET = {"carrier": 5, "battleship": 4, "destroyer": 3, "submarine": 3, "patrolboat": 2}


def team_key(name, team_secret):
    salt = hash.blake2b(b"battleship-salvo/" + name.encode(), digest_size=16, encoder=encoding.RawEncoder)
    return pwhash.argon2id.kdf(
        32,
        team_secret.encode(),
        salt,
        opslimit=pwhash.argon2id.OPSLIMIT_INTERACTIVE,
        memlimit=pwhash.argon2id.MEMLIMIT_INTERACTIVE,
    )


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


class JoinRefused(Exception):
    def __init__(self, report):
        super().__init__(f"join refused: {report['code']}: {report['error']}")
        self.code = report["code"]


class RawClient:
    def __init__(self, args):
        self.name, self.secret = args.name, args.secret
        self.root = f"/{args.prefix}" if args.prefix else ""
        self.key = team_key(self.name, self.secret)
        self.seen = {}  # topic -> latest payload (text)
        self.live = set()  # topics published since we subscribed (not a retained copy)
        self.refusals = []  # join refusals on the public /game/errors
        self.shots_at_me = set()  # (game, turn, shot) of every hit: QoS 1 may deliver one twice; (turn, shot) is per game
        self.cond = threading.Condition()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        if args.ca_file:
            self.client.tls_set(ca_certs=args.ca_file)  # verify the broker against the organiser's CA only
        self.client.username_pw_set(args.username or self.name, args.password)
        self.client.on_connect = self.on_connect
        self.client.on_message = self.on_message
        self.client.connect(args.host, args.port or (8883 if args.ca_file else 1883))
        self.client.loop_start()

    def t(self, path):
        return self.root + path

    def on_connect(self, client, userdata, flags, reason_code, properties):
        # The public topics, and what is addressed to us: no team may read a fire topic.
        me = f"/players/{self.name}"
        client.subscribe(
            [
                (self.t(path), 1)
                for path in [
                    "/game/#",
                    "/players/list",
                    "/players/+/defeated",
                    f"{me}/hit",
                    f"{me}/error",
                    f"{me}/ships/+/approved",
                    f"{me}/ships/+/error",
                ]
            ]
        )

    def on_message(self, client, userdata, msg):
        text = msg.payload.decode()
        with self.cond:
            self.seen[msg.topic] = text
            if not msg.retain:
                self.live.add(msg.topic)
            if msg.topic == self.t(f"/players/{self.name}/hit"):
                hit = json.loads(text)
                self.shots_at_me.add((hit.get("game"), hit["turn"], hit["shot"]))
            elif msg.topic == self.t("/game/errors"):
                report = json.loads(text)
                if "request_id" in report:  # anybody's join refusal: join() picks ours
                    self.refusals.append(report)
            elif msg.topic.endswith("/error"):  # only the referee writes our error topics
                report = json.loads(text)
                print(f"referee says: {report['code']}: {report['error']} ({report['topic']})")
            self.cond.notify_all()

    def wait(self, predicate, timeout=120):
        with self.cond:
            if not self.cond.wait_for(predicate, timeout):
                raise TimeoutError("the referee did not answer in time")

    def get(self, path):
        return self.seen.get(self.t(path))

    def send(self, path, payload):
        self.client.publish(self.t(path), payload, qos=1)

    def refusal(self, request_id):
        """The refusal on /game/errors that echoes our request_id, if any."""
        return next((r for r in self.refusals if r["request_id"] == request_id), None)

    def join(self, attempts=20):
        self.wait(lambda: self.get("/game/state") == "lobby" and self.get("/game/pubkey"))
        pubkey = PublicKey(base64.b64decode(self.get("/game/pubkey")))
        # Accepted once the referee publishes our ships as not yet approved.
        approved = self.t(f"/players/{self.name}/ships/carrier/approved")
        for attempt in range(1, attempts + 1):
            request_id = utils.random(12).hex()  # unguessable: only a refusal echoing it is ours
            request = json.dumps({"name": self.name, "secret": self.secret, "request_id": request_id})
            sealed = SealedBox(pubkey).encrypt(request.encode())
            self.send("/game/request_participation", base64.b64encode(sealed).decode())
            self.wait(lambda rid=request_id: approved in self.live or self.refusal(rid) is not None)
            report = self.refusal(request_id)
            if report is None:
                return
            # busy: the referee is checking other joins and asks us to try again in a moment
            if report["code"] != "busy" or attempt == attempts:
                raise JoinRefused(report)
            with self.cond:
                self.cond.wait(0.5)

    def place(self, rng):
        for ship, (x, y, o) in random_fleet(rng).items():
            placement = json.dumps({"coordinates": f"{x};{y}", "orientation": o})
            self.send(f"/players/{self.name}/ships/{ship}/place", seal(self.key, placement))
        self.wait(lambda: all(self.get(f"/players/{self.name}/ships/{s}/approved") == "true" for s in FLEET))

    def fire(self, target, x, y, turn, game):
        # v2: the signed data names its target, turn and game; a leaked
        # signature is good for this one shot only.
        data = {"x": x, "y": y, "target": target, "turn": turn, "game": game}
        text = json.dumps(data, separators=(",", ":"))
        self.send(f"/players/{target}/fire", json.dumps({"data": data, "signature": seal(self.key, text)}))

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
            turn, game = json.loads(self.get("/game/turn")), self.get("/game/id")
            last_turn = turn["turn"]
            players = json.loads(self.get("/players/list"))
            live = [p for p in players if p != self.name and self.get(f"/players/{p}/defeated") != "true"]
            for _ in range(turn["shots"]):
                target = rng.choice(live)
                cells = untried.setdefault(target, [])
                if not cells:  # a salvo can outnumber the cells left: sweep again
                    cells.extend((x, y) for x in range(10) for y in range(10))
                x, y = cells.pop(rng.randrange(len(cells)))
                self.fire(target, x, y, last_turn, game)

    def stats(self):
        self.wait(lambda: self.get(f"/game/stats/players/{self.name}"), timeout=10)
        return json.loads(self.get(f"/game/stats/players/{self.name}"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--username", help="MQTT username (default: the team name)")
    parser.add_argument("--password", help="MQTT password")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, help="default 1883, or 8883 with --ca-file")
    parser.add_argument("--ca-file", help="MQTT over TLS, trusting only this CA (the organiser's ca.crt)")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    me = RawClient(args)
    try:
        me.join()
        me.place(rng)
        winner = me.play(rng)
        stats = me.stats()
        print(f"me: {stats['shots']} shots, {stats['hits']} hits; shot at {len(me.shots_at_me)} times")
        print("winner:", winner or "nobody")
    except JoinRefused as refused:
        print(refused)
        raise SystemExit(1) from None
    finally:
        me.client.disconnect()
        me.client.loop_stop()


if __name__ == "__main__":
    main()
