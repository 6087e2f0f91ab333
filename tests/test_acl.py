"""The shipped mosquitto.acl on a real broker: referee / team / another team /
anonymous x every topic family of spec section 9, read and write, with and
without an arena prefix."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from mosquitto import Mosquitto
from mqttkit import Recorder, wait_until

pytestmark = pytest.mark.mqtt

ROLES = ("referee", "alice", "bob", None)  # None: anonymous spectator
NOT_AUTHORIZED = 0x87

# Topic (relative to the arena root) -> permissions of (referee, alice, bob, anonymous).
# alice owns every /players/alice/... topic; bob is another team.
MATRIX: dict[str, tuple[str, str, str, str]] = {
    "/game/request_participation": ("rw", "w", "w", ""),
    **{
        f"/game/{t}": ("rw", "r", "r", "r")
        for t in (
            "state",
            "server",
            "pubkey",
            "deadline",
            "turn",
            "current",
            "hits",
            "salvo",
            "winner",
            "errors",
        )
    },
    "/game/stats/summary": ("rw", "r", "r", "r"),
    "/game/stats/players/alice": ("rw", "r", "r", "r"),
    "/players/list": ("rw", "r", "r", "r"),
    "/players/count": ("rw", "r", "r", "r"),
    "/players/alice/ships/carrier/place": ("rw", "rw", "", ""),
    "/players/alice/fire": ("rw", "rw", "w", ""),
    "/players/alice/hit": ("rw", "r", "", ""),
    "/players/alice/error": ("rw", "r", "", ""),
    "/players/alice/ships/carrier/approved": ("rw", "r", "", ""),
    "/players/alice/ships/carrier/error": ("rw", "r", "", ""),
    "/players/alice/ships/carrier/sunk": ("rw", "r", "r", "r"),
    "/players/alice/defeated": ("rw", "r", "r", "r"),
}
_probe = itertools.count()


@pytest.fixture(params=[False, True], ids=["unprefixed", "prefixed"])
def root(request: pytest.FixtureRequest, prefix: str) -> str:
    return f"/{prefix}" if request.param else ""


@pytest.fixture
def clients(broker: Mosquitto, root: str) -> Iterator[dict[str | None, Recorder]]:
    subs = [root + t for t in MATRIX]
    made = {role: Recorder(broker, role, subs) for role in ROLES}
    yield made
    for rec in made.values():
        rec.close()


def test_write_permissions(clients: dict[str | None, Recorder], root: str) -> None:
    observer = clients["referee"]
    expected_seen: set[bytes] = set()
    denied: set[bytes] = set()
    for topic, perms in MATRIX.items():
        for role, perm in zip(ROLES, perms, strict=True):
            payload = f"probe-{next(_probe)}-{role}".encode()
            rc = clients[role].publish(root + topic, payload)
            allowed = "w" in perm
            assert (rc < 0x80) == allowed, f"{role or 'anonymous'} write {topic}: PUBACK {rc:#x}, expected {perm!r}"
            (expected_seen if allowed else denied).add(payload)
    wait_until(lambda: expected_seen <= {m.payload for m in observer.messages}, what="allowed probes")
    assert not denied & {m.payload for m in observer.messages}, "a denied publish reached a subscriber"


def test_read_permissions(clients: dict[str | None, Recorder], root: str) -> None:
    referee = clients["referee"]
    probes = {}
    for topic in MATRIX:
        payload = f"read-{next(_probe)}".encode()
        probes[payload] = topic
        referee.publish(root + topic, payload)
    # A last message every role may read: once it arrived, everything readable did.
    sentinel = f"sentinel-{next(_probe)}".encode()
    referee.publish(root + "/game/state", sentinel)
    for role, rec in clients.items():
        rec.wait(lambda m: m.payload == sentinel)
        got = {probes[m.payload] for m in rec.messages if m.payload in probes}
        i = ROLES.index(role)
        expected = {t for t, perms in MATRIX.items() if "r" in perms[i]}
        assert got == expected, f"{role or 'anonymous'} read {sorted(got ^ expected)} wrongly"


def test_team_cannot_place_for_another_team(broker: Mosquitto, prefix: str) -> None:
    bob = Recorder(broker, "bob", [])
    try:
        assert bob.publish(f"/{prefix}/players/alice/ships/carrier/place", "x") == NOT_AUTHORIZED
        assert bob.publish(f"/{prefix}/players/bob/ships/carrier/place", "x") < 0x80
    finally:
        bob.close()


def test_wrong_password_is_refused(broker: Mosquitto) -> None:
    import paho.mqtt.client as paho

    from salvo.mqtt import Broker, new_client

    client = new_client(Broker(host="127.0.0.1", port=broker.port, username="alice", password="wrong"))
    result: list[int] = []
    client.on_connect = lambda c, u, f, rc, p: result.append(rc.value)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    try:
        wait_until(lambda: bool(result), what="CONNACK")
        assert result[0] in (0x86, 0x87)  # bad user name or password / not authorized
    finally:
        client.loop_stop()
        assert isinstance(client, paho.Client)
