"""TLS for a venue's broker (spec section 9): a CA of the organiser's own
and a server certificate signed by it, for mosquitto's TLS listener.

``issue(directory, hosts, server_dir=...)`` writes four PEM files:

- in ``directory`` (``data/tls``), the CA: ``ca.crt`` (0644), handed to every
  team; clients verify the broker with it (``--ca-file``,
  ``SalvoClient(ca_file=...)``). Its SHA-256 fingerprint goes on the team
  cards so a team can check the file it got is the organisers'. ``ca.key``
  (0600): only the organiser; it could sign a certificate for any name. Kept
  and reused, so the teams' ``ca.crt`` stays valid when the server
  certificate is issued again for other addresses.
- in ``server_dir`` (``data/broker``, the only directory the broker's
  container mounts), the broker's ``server.crt`` (0644) and ``server.key``
  (0600). mosquitto reads the key as the file's owner: in Docker every
  container runs as uid 1883, which owns ``data/``; natively the guide runs
  mosquitto as the organiser's own user.

Keys are ECDSA P-256 (every TLS 1.2 stack speaks it). The server certificate
names ``localhost``, ``127.0.0.1`` and every ``--host`` (DNS names and IP
addresses) as subjectAltNames: clients check the name they dialled against
them. mosquitto re-reads certificates on SIGHUP.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from salvo.failures import Failure, MissingExtra

try:  # the 'organiser' extra: only the organiser's certificate and card commands need it
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise MissingExtra(
        "certificates need the 'organiser' extra: pip install 'salvo[organiser]' (cryptography)"
    ) from exc

DEFAULT_DIR = Path("data/tls")
CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY = "ca.crt", "ca.key", "server.crt", "server.key"
#: Always in the server certificate: the organiser's own tools on the laptop.
ALWAYS_HOSTS = ("localhost", "127.0.0.1")
CA_DAYS = 5 * 365
SERVER_DAYS = 365
#: Certificates start a little in the past: clocks at a venue disagree.
_BACKDATE = dt.timedelta(minutes=10)
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_DNS_RE = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")


class TlsError(Failure):
    """A certificate problem, with a message for the organiser."""


@dataclass(frozen=True)
class Issued:
    """What :func:`issue` did."""

    directory: Path
    new_ca: bool
    hosts: tuple[str, ...]
    ca_fingerprint: str
    not_after: dt.datetime
    #: where the broker's certificate and key went
    server_dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY

    @property
    def server_cert(self) -> Path:
        return self.server_dir / SERVER_CERT

    @property
    def server_key(self) -> Path:
        return self.server_dir / SERVER_KEY


def subject_alt_names(hosts: Iterable[str]) -> tuple[list[x509.GeneralName], tuple[str, ...]]:
    """SANs for ``hosts`` plus :data:`ALWAYS_HOSTS`, and their names in
    order without duplicates. Raises TlsError for a malformed host."""
    names: list[x509.GeneralName] = []
    seen: dict[str, None] = {}
    for raw in (*ALWAYS_HOSTS, *hosts):
        host = raw.strip().lower()
        name: x509.GeneralName
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            if not _DNS_RE.fullmatch(host):
                raise TlsError(f"--host {raw!r} is neither a DNS name nor an IP address") from None
            key, name = host, x509.DNSName(host)
        else:
            key, name = str(ip), x509.IPAddress(ip)
        if key not in seen:
            seen[key] = None
            names.append(name)
    return names, tuple(seen)


def certificate_fingerprint(path: Path) -> str:
    """SHA-256 of a PEM certificate as ``AB:CD:...`` (what ``openssl x509
    -noout -fingerprint -sha256`` prints)."""
    return _fingerprint(_load_cert(path))


def issue(
    directory: Path = DEFAULT_DIR,
    hosts: Iterable[str] = (),
    *,
    days: int = SERVER_DAYS,
    server_dir: Path | None = None,
) -> Issued:
    """Create the CA unless ``directory`` has one, and (re)issue the server
    certificate for ``hosts`` (plus localhost and 127.0.0.1) for ``days``,
    into ``server_dir`` (default: ``directory``)."""
    sans, names = subject_alt_names(hosts)
    server_dir = directory if server_dir is None else server_dir
    directory.mkdir(parents=True, exist_ok=True)
    server_dir.mkdir(parents=True, exist_ok=True)
    ca_cert_path, ca_key_path = directory / CA_CERT, directory / CA_KEY
    now = dt.datetime.now(dt.UTC)
    if ca_cert_path.exists() != ca_key_path.exists():
        present, missing = (ca_cert_path, ca_key_path) if ca_cert_path.exists() else (ca_key_path, ca_cert_path)
        raise TlsError(f"{present} exists but {missing} does not: restore it, or move both away for a new CA")
    new_ca = not ca_cert_path.exists()
    if new_ca:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key, now, hosts)
        _write(ca_key_path, _key_pem(ca_key), 0o600)
        _write(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    else:
        ca_cert, ca_key = _load_ca(ca_cert_path, ca_key_path, now)
    _check_constraints(ca_cert, sans, ca_cert_path)
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _server_certificate(server_key, ca_cert, ca_key, sans, names[len(ALWAYS_HOSTS) :], now, not_after)
    # The key first: a reload between the two writes then fails loudly
    # (mismatched pair) rather than serving a certificate nobody can use.
    _write(server_dir / SERVER_KEY, _key_pem(server_key), 0o600)
    _write(server_dir / SERVER_CERT, server_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return Issued(directory, new_ca, names, _fingerprint(ca_cert), not_after, server_dir)


#: What a venue CA may vouch for, beside the hosts it was made for: private
#: addresses and local names (the organiser imports the CA into a browser:
#: constrained, it cannot pose as any site of the internet).
_PRIVATE_NETS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10")
_PRIVATE_NETS6 = ("::1/128", "fc00::/7", "fe80::/10")
_LOCAL_NAMES = ("localhost", "local", "lan", "home.arpa", "internal")


def _venue_constraints(hosts: Iterable[str]) -> x509.NameConstraints:
    """The CA's permitted names: :data:`_LOCAL_NAMES`, the private networks,
    and the hosts given when it was made (a public name or address too)."""
    permitted: list[x509.GeneralName] = [x509.DNSName(n) for n in _LOCAL_NAMES]
    permitted += [x509.IPAddress(ipaddress.ip_network(n)) for n in (*_PRIVATE_NETS, *_PRIVATE_NETS6)]
    for name in subject_alt_names(hosts)[0]:
        value = name.value
        if isinstance(name, x509.IPAddress) and not _permitted(name, permitted):
            permitted.append(x509.IPAddress(ipaddress.ip_network(value)))
        elif isinstance(name, x509.DNSName) and not _permitted(name, permitted):
            permitted.append(x509.DNSName(value))
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None)


def _permitted(name: x509.GeneralName, permitted: Iterable[x509.GeneralName]) -> bool:
    """Whether a SAN falls within the name constraints ``permitted`` (RFC 5280)."""
    for p in permitted:
        if isinstance(name, x509.IPAddress) and isinstance(p, x509.IPAddress):
            net, ip = p.value, name.value
            if isinstance(net, ipaddress.IPv4Network | ipaddress.IPv6Network) and ip in net:
                return True
        elif (
            isinstance(name, x509.DNSName)
            and isinstance(p, x509.DNSName)
            and (name.value == p.value or name.value.endswith("." + p.value))
        ):
            return True
    return False


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: dt.datetime, hosts: Iterable[str] = ()) -> x509.Certificate:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "salvo"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"salvo venue CA {now:%Y-%m-%d} {os.urandom(3).hex()}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        # It signs server certificates only, never another CA.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(_venue_constraints(hosts), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    sans: list[x509.GeneralName],
    given: tuple[str, ...],
    now: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    common_name = given[0] if given else ALWAYS_HOSTS[0]
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _check_constraints(ca: x509.Certificate, sans: list[x509.GeneralName], ca_path: Path) -> None:
    """A name the kept CA may not vouch for: say so (a browser, OpenSSL
    would refuse the certificate anyway). CAs from before have none."""
    try:
        constraints = ca.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return
    outside = [str(n.value) for n in sans if not _permitted(n, constraints.permitted_subtrees or [])]
    if outside:
        raise TlsError(
            f"the CA in {ca_path} vouches only for the venue names it was made for and private addresses, not"
            f" {', '.join(outside)}: make a new CA for them (move {ca_path.parent} away, run salvo tls with every"
            " --host, and hand the teams the new ca.crt)"
        )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TlsError(f"cannot read the certificate {path}: {exc}") from None


def _load_ca(cert_path: Path, key_path: Path, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = _load_cert(cert_path)
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise TlsError(f"cannot read the CA key {key_path}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise TlsError(f"{key_path} is not the key of {cert_path}")
    try:
        cert.verify_directly_issued_by(cert)
    except (ValueError, TypeError, InvalidSignature):
        raise TlsError(f"{cert_path} is not a self-signed CA certificate") from None
    if cert.not_valid_after_utc <= now + dt.timedelta(days=1):
        raise TlsError(f"the CA {cert_path} expires on {cert.not_valid_after_utc:%Y-%m-%d}: move it away for a new one")
    return cert, key


def _fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    # Atomic, and created with its final mode: a key is never readable by
    # others, not even for an instant, unless its mode says so.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
