"""Transport (spec section 9): teams play over TLS verified with the
organiser's CA; a sniffer on the wire sees the password and a plain join's
secret on the plain listener and neither on the TLS one; the shipped broker
configuration keeps plain text on loopback."""

from __future__ import annotations

import contextlib
import datetime
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML has no inline types; types-PyYAML is no test dependency
from cryptography import x509

from salvo.net.mqtt import Broker, new_client
from salvo.organiser import tls
from salvo.sdk.client import SalvoClient

from mosquitto import ROOT, USERS, Mosquitto
from mqttkit import Recorder, wait_until

SECRETS = {"alice": "alice-secret-for-tests", "bob": "bob-secret-for-tests"}


def test_team_joins_over_tls_with_the_generated_ca(
    broker: Mosquitto, start_referee: Any, prefix: str, watcher: Recorder
) -> None:
    start_referee()
    url = broker.tls_url("alice")
    with SalvoClient("alice", SECRETS["alice"], url, prefix=prefix, ca_file=str(broker.ca_file)) as alice:
        alice.join()
        watcher.wait_for(f"/{prefix}/players/list", '["alice"]')


def test_client_without_the_ca_is_refused(broker: Mosquitto, prefix: str, tmp_path: Path) -> None:
    impostor_ca = tls.issue(tmp_path / "other").ca_cert  # a CA, but not the broker's
    for ca_file in (None, str(impostor_ca)):
        client = new_client(Broker.from_url(broker.tls_url("alice")).with_ca_file(ca_file))
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            client.connect("127.0.0.1", broker.tls_port)
    sdk = SalvoClient("alice", SECRETS["alice"], broker.tls_url("alice"), prefix=prefix)
    with pytest.raises(ConnectionError):
        sdk.connect(timeout=2)
    sdk.close()


def test_the_venue_listener_refuses_anonymous_clients(broker: Mosquitto) -> None:
    """Anonymous clients could otherwise hold all of the teams' listener's
    connections (max_connections) and keep the teams out; they may read the
    public topics on the local listener only (salvo spectate serves the room)."""

    def connack(url: str, port: int) -> int:
        got: list[int] = []
        client = new_client(Broker.from_url(url).with_ca_file(str(broker.ca_file)))
        client.on_connect = lambda _c, _u, _f, rc, _p: got.append(rc.value)
        client.connect("127.0.0.1", port)
        client.loop_start()
        try:
            wait_until(lambda: bool(got), what="CONNACK")
            return got[0]
        finally:
            client.disconnect()
            client.loop_stop()

    assert connack(f"mqtts://127.0.0.1:{broker.tls_port}", broker.tls_port) in (0x86, 0x87)
    assert connack(broker.tls_url("alice"), broker.tls_port) == 0
    assert connack(f"mqtt://127.0.0.1:{broker.port}", broker.port) == 0  # local tools, read-only


def test_the_venue_ca_cannot_pose_as_a_site_of_the_internet(tmp_path: Path) -> None:
    """Organisers import the CA into a browser (the console over HTTPS): its
    key signing a certificate for any site would then be trusted for it.
    The CA is name-constrained to the venue's names (given when it is made),
    local names and private addresses: a certificate its key signs for
    anything else is refused by OpenSSL, as by browsers."""
    made = tls.issue(tmp_path, ["contest.example.org", "192.168.1.20"])
    ca = x509.load_pem_x509_certificate(made.ca_cert.read_bytes())
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical and x509.DNSName("contest.example.org") in (constraints.value.permitted_subtrees or [])

    def verified(host: str) -> bool:
        """A certificate for ``host`` signed with the CA's own key, checked by OpenSSL."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        ca_key = serialization.load_pem_private_key(made.ca_key.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        sans, names = tls.subject_alt_names([host])
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = tls._server_certificate(key, ca, ca_key, sans, names[2:], now, now + datetime.timedelta(days=1))
        (tmp_path / "leaf.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        done = subprocess.run(
            ["openssl", "verify", "-CAfile", str(made.ca_cert), str(tmp_path / "leaf.pem")],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.returncode == 0

    assert verified("contest.example.org") and verified("night.local") and verified("10.1.2.3")
    assert not verified("www.google.com") and not verified("8.8.8.8")


def test_tls_issues_a_server_certificate_under_a_kept_ca(tmp_path: Path) -> None:
    apart = tls.issue(tmp_path / "tls", server_dir=tmp_path / "broker")  # the guide's layout: data/tls, data/broker
    assert sorted(p.name for p in (tmp_path / "broker").iterdir()) == ["server.crt", "server.key"]
    assert apart.server_key == tmp_path / "broker" / "server.key" and apart.ca_key == tmp_path / "tls" / "ca.key"
    tmp_path = tmp_path / "together"
    first = tls.issue(tmp_path, ["night.local", "192.168.1.20"])
    assert first.new_ca and first.hosts == ("localhost", "127.0.0.1", "night.local", "192.168.1.20")
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    # the keys for their owner only: the broker reads server.key as its owner (uid 1883 in Docker)
    assert modes == {"ca.crt": 0o644, "ca.key": 0o600, "server.crt": 0o644, "server.key": 0o600}
    again = tls.issue(tmp_path, ["hall-b.local"])  # a new venue address
    assert not again.new_ca and again.ca_fingerprint == first.ca_fingerprint
    assert again.ca_fingerprint == tls.certificate_fingerprint(tmp_path / "ca.crt")
    cert = x509.load_pem_x509_certificate((tmp_path / "server.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "hall-b.local"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    # The server key is the certificate's, fit for mosquitto.
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    with pytest.raises(tls.TlsError, match="neither a DNS name nor an IP address"):
        tls.issue(tmp_path, ["bad host!"])
    # the CA vouches for its venue's names and private addresses only (see the next test)
    with pytest.raises(tls.TlsError, match=r"not www\.example\.org: make a new CA"):
        tls.issue(tmp_path, ["www.example.org"])
    (tmp_path / "ca.key").unlink()
    with pytest.raises(tls.TlsError, match=r"ca\.crt exists but .*ca\.key does not"):
        tls.issue(tmp_path)


class Tap:
    """A TCP forwarder on a free loopback port in front of ``port``: it
    records every byte the client sends, as a sniffer on the network would."""

    def __init__(self, port: int) -> None:
        self.port_behind = port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._sent = bytearray()
        self._socks: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def sent(self) -> bytes:
        with self._lock:
            return bytes(self._sent)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.port_behind))
            with self._lock:
                self._socks += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        with contextlib.suppress(OSError):  # either side closed
            while data := src.recv(65536):
                if record:
                    with self._lock:
                        self._sent += data
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            for sock in self._socks:
                sock.close()


@pytest.fixture
def taps(broker: Mosquitto) -> Iterator[tuple[Tap, Tap]]:
    plain, tls_tap = Tap(broker.port), Tap(broker.tls_port)
    yield plain, tls_tap
    plain.close()
    tls_tap.close()


def test_a_sniffer_reads_credentials_on_plain_mqtt_but_not_over_tls(
    broker: Mosquitto, start_referee: Any, prefix: str, watcher: Recorder, taps: tuple[Tap, Tap]
) -> None:
    start_referee()
    plain, tls_tap = taps
    # Both join with plain JSON: the game secret is in the message itself.
    alice = SalvoClient(
        "alice", SECRETS["alice"], f"mqtt://alice:{USERS['alice']}@127.0.0.1:{plain.port}", prefix=prefix, sealed=False
    )
    bob = SalvoClient(
        "bob",
        SECRETS["bob"],
        f"mqtts://bob:{USERS['bob']}@127.0.0.1:{tls_tap.port}",
        prefix=prefix,
        sealed=False,
        ca_file=str(broker.ca_file),
    )
    with alice.connect(), bob.connect():
        alice.join()
        bob.join()
        # Both joins went through their taps: the bytes are all recorded.
        watcher.wait(lambda m: m.topic == f"/{prefix}/players/list" and set(m.json()) == {"alice", "bob"})
    assert USERS["alice"].encode() in plain.sent  # the MQTT password in CONNECT
    assert SECRETS["alice"].encode() in plain.sent  # the game secret in the join
    seen = tls_tap.sent
    assert seen[:1] == b"\x16" and len(seen) > 1000  # a TLS handshake, then records
    assert USERS["bob"].encode() not in seen
    assert SECRETS["bob"].encode() not in seen


# -- the shipped configuration ------------------------------------------------------------


def listeners(conf: str) -> list[tuple[str, dict[str, str]]]:
    """(``listener`` line, its options) for each listener of a mosquitto.conf;
    a listener's options run until the next blank line or listener."""
    found: list[tuple[str, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for line in conf.splitlines():
        if not line.strip():
            current = None
        elif line.startswith("listener "):
            current = {}
            found.append((line, current))
        elif current is not None and not line.startswith("#"):
            key, _, value = line.partition(" ")
            current[key] = value
    return found


def test_shipped_conf_keeps_plain_mqtt_on_loopback_and_offers_tls() -> None:
    conf = (ROOT / "mosquitto.conf").read_text()
    found = listeners(conf)
    plain = [(line, opts) for line, opts in found if "certfile" not in opts]
    assert [line for line, _ in plain] == ["listener 1883 127.0.0.1"]
    secure = {line: opts for line, opts in found if "certfile" in opts}
    # every interface: the venue's teams, and the organiser's referees on other machines
    assert list(secure) == ["listener 8883", "listener 8884"]
    for opts in secure.values():
        assert opts["protocol"] == "mqtt" and opts["tls_version"] == "tlsv1.2" and opts["allow_anonymous"] == "false"
        for key, name in (("certfile", "server.crt"), ("keyfile", "server.key")):
            assert opts[key] == f"/data/broker/{name}"
        assert "cafile" not in opts  # clients log in: the broker verifies no certificate and holds no CA
    # a team's login holds one connection on its listener; only the referee logs in on the other
    assert secure["listener 8883"]["use_username_as_clientid"] == "true"
    assert secure["listener 8884"]["password_file"] == "/data/broker/referee.passwd"
    assert "use_username_as_clientid" not in secure["listener 8884"]
    assert not re.search(r"^\s*protocol\s+websockets", conf, re.MULTILINE)  # spectators use salvo spectate
    assert len(found) == len(re.findall(r"^listener ", conf, re.MULTILINE))


def test_compose_publishes_tls_and_keeps_plain_mqtt_on_the_compose_network() -> None:
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["mosquitto"]
    assert sorted(service["ports"]) == [
        "${SALVO_REFEREE_TLS_PORT:-8884}:8884",
        "${SALVO_TLS_PORT:-8883}:8883",
        "127.0.0.1:${SALVO_MQTT_PORT:-1883}:1883",
    ]
    assert "./data/broker:/data/broker:ro" in service["volumes"]  # passwd, ACL, certificate: a directory, read-only
    conf = (ROOT / "mosquitto.conf").read_text()
    for key in ("password_file", "acl_file", "certfile", "keyfile"):
        assert re.search(rf"^{key} /data/broker/\S+$", conf, re.MULTILINE), key
    # The service runs the shipped conf with only the plain listener's bind
    # address dropped (compose turns $$ into $; sed's \. and $ mean what
    # Python's do).
    command = " ".join(service["command"]).replace("$$", "$")
    match = re.search(r"sed 's/(.+?)/(.+?)/' /mosquitto/config/mosquitto.conf > (\S+)", command)
    assert match and f"mosquitto -c {match[3]}" in command
    rewritten, n = re.subn(match[1], match[2], conf, flags=re.MULTILINE)
    assert n == 1
    assert [line for line, opts in listeners(rewritten) if "certfile" not in opts] == ["listener 1883"]
