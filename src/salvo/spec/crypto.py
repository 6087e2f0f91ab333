"""All cryptography of the protocol (spec section 3), on libsodium via PyNaCl.

* Team key: argon2id13 of the UTF-8 secret, 32 bytes, INTERACTIVE limits,
  salt = 16-byte BLAKE2b of ``battleship-salvo/<name>``. About 70 ms and
  64 MiB: callers on a network thread must run :func:`derive_team_key`
  elsewhere.
* ``seal(key, text)``: base64 (standard, padded) of nonce(24) || secretbox.
* Signed message: ``{"data": v, "signature": seal(key, json(v))}``; verified by
  opening the signature and comparing the plaintext to ``data`` as JSON values.
* Sealed join: a libsodium sealed box to the referee's X25519 key.

Decoding is strict: bad base64, a box shorter than 40 bytes or plaintext that
is not UTF-8 JSON is :class:`~salvo.spec.errors.Malformed`; a box that does not
open with the expected key is :class:`~salvo.spec.errors.Illegal` (it parsed, but
is not from whom it must be).

Who sent a signed message is whoever's key opens it (:func:`identify`):
protocol v2 attributes every fire message that way.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import nacl.exceptions
import nacl.hash
import nacl.utils
from nacl.bindings import crypto_secretbox_open_easy
from nacl.encoding import RawEncoder
from nacl.public import PrivateKey, PublicKey, SealedBox
from nacl.pwhash import argon2id
from nacl.secret import SecretBox

from salvo.spec import codec
from salvo.spec.errors import Code, Illegal, Malformed

KEY_BYTES: Final = 32
NONCE_BYTES: Final = SecretBox.NONCE_SIZE  # 24
MIN_BOX_BYTES: Final = NONCE_BYTES + SecretBox.MACBYTES  # 40
MIN_SEALED_BYTES: Final = PublicKey.SIZE + SecretBox.MACBYTES  # 48
SALT_CONTEXT: Final = b"battleship-salvo/"


def team_salt(name: str) -> bytes:
    """The 16-byte argon2 salt of a team: unkeyed BLAKE2b of the context + name."""
    return nacl.hash.blake2b(SALT_CONTEXT + name.encode("utf-8"), digest_size=16, encoder=RawEncoder)


def derive_team_key(name: str, secret: str) -> bytes:
    """The team key. Slow on purpose (argon2id, 64 MiB): never call it on a
    thread that must stay responsive. Releases the GIL while it works."""
    return argon2id.kdf(
        KEY_BYTES,
        secret.encode("utf-8"),
        team_salt(name),
        opslimit=argon2id.OPSLIMIT_INTERACTIVE,
        memlimit=argon2id.MEMLIMIT_INTERACTIVE,
    )


def b64decode_strict(text: str | bytes, what: str) -> bytes:
    """Standard-alphabet, padded base64 or Malformed."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Malformed(f"{what} is not standard base64") from None


def seal(key: bytes, text: str | bytes, nonce: bytes | None = None) -> str:
    """``seal(key, text)`` of the spec. ``nonce`` is for fixed test vectors
    only: a repeated nonce under one key breaks secretbox."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    box = SecretBox(key).encrypt(data, nonce if nonce is not None else nacl.utils.random(NONCE_BYTES))
    return base64.b64encode(bytes(box)).decode("ascii")


def decode_box(text: str | bytes, what: str) -> bytes:
    """Decode a sealed box's base64 and check its length; no key needed."""
    raw = b64decode_strict(text, what)
    if len(raw) < MIN_BOX_BYTES:
        raise Malformed(f"{what} too short: {len(raw)} bytes, at least {MIN_BOX_BYTES}")
    return raw


def try_open(key: bytes, raw: bytes) -> bytes | None:
    """Open a decoded box with ``key``; None when it does not open."""
    try:
        # The binding SecretBox(key).decrypt(raw) ends in, without its object
        # and encoder layers: every fire message is opened here.
        return crypto_secretbox_open_easy(raw[NONCE_BYTES:], raw[:NONCE_BYTES], key)
    except nacl.exceptions.CryptoError:
        return None


def open_box(key: bytes, raw: bytes, what: str, whose: str, code: Code = Code.BAD_SIGNATURE) -> bytes:
    """Open a decoded box with ``key``; Illegal when it is not ``whose``."""
    plaintext = try_open(key, raw)
    if plaintext is None:
        raise Illegal(code, f"{what} does not open with {whose} key")
    return plaintext


def unseal(key: bytes, text: str | bytes, what: str, whose: str, code: Code = Code.CANNOT_DECRYPT) -> bytes:
    """Inverse of :func:`seal`: decode strictly, then open."""
    return open_box(key, decode_box(text, what), what, whose, code)


def identify(raw: bytes, keys: Iterable[tuple[str, bytes]]) -> tuple[str, bytes] | None:
    """Who sealed the decoded box ``raw``: the first ``(name, key)`` whose key
    opens it, as ``(name, plaintext)``; None when no key does. Put the
    likeliest sender first: every miss costs one more (microsecond) try."""
    for name, key in keys:
        plaintext = try_open(key, raw)
        if plaintext is not None:
            return name, plaintext
    return None


def nonce_of(raw: bytes) -> bytes:
    """A decoded box's 24-byte nonce: the replay-cache key (one byte string
    has several base64 spellings, so the text would not do)."""
    return raw[:NONCE_BYTES]


def sign(key: bytes, data: Any, nonce: bytes | None = None) -> dict[str, Any]:
    """A signed message of the spec: ``{"data": data, "signature": ...}``."""
    return {"data": data, "signature": seal(key, codec.dumps(data), nonce)}


def check_signed(plaintext: bytes, data: Any) -> None:
    """The opened signature must say exactly ``data`` (as a JSON value)."""
    # Clients sign the compact JSON of data (as sign() does): then the text is
    # byte for byte what dumps(data) gives, and that is the check. Any other
    # spelling of the same value is parsed and compared as JSON values.
    if plaintext != codec.dumps(data).encode():
        signed = codec.loads(plaintext, "signed text")  # Malformed: not UTF-8 JSON
        if not codec.json_equal(signed, data):
            raise Illegal(Code.BAD_SIGNATURE, "signature does not match data")


def verify(key: bytes, data: Any, signature: str, whose: str = "the current player's") -> bytes:
    """Check a signed message under one key; return the signature's nonce."""
    raw = decode_box(signature, "signature")
    check_signed(open_box(key, raw, "signature", whose), data)
    return nonce_of(raw)


# -- referee key pair (sealed participation requests) -------------------------


def load_or_create_referee_key(path: Path) -> PrivateKey:
    """The referee's X25519 key; created (mode 0600) on first use so that
    ``/game/pubkey`` survives restarts."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        key = PrivateKey.generate()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64encode(bytes(key)) + b"\n")
        return key
    return PrivateKey(b64decode_strict(raw.strip(), f"referee key file {path}"))


def client_id_tag(key: PrivateKey) -> str:
    """A stable, unguessable part for the referee's MQTT client ids (12 hex
    digits): derived from its private key, so it survives restarts with the
    key file (the persistent session needs that) and nobody without the key
    file can take the referee's connections over by guessing the id."""
    return nacl.hash.blake2b(b"salvo/mqtt-client-id", key=bytes(key), digest_size=6).decode("ascii")


def public_key_b64(key: PrivateKey) -> str:
    return base64.b64encode(bytes(key.public_key)).decode("ascii")


def seal_to(pubkey_b64: str, text: str | bytes) -> str:
    """A sealed participation request to the referee's public key."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    pub = PublicKey(b64decode_strict(pubkey_b64, "the referee's key (/game/pubkey)"))
    return base64.b64encode(SealedBox(pub).encrypt(data)).decode("ascii")


def open_sealed_request(key: PrivateKey, text: str | bytes) -> bytes:
    raw = b64decode_strict(text, "sealed request")
    if len(raw) < MIN_SEALED_BYTES:
        raise Malformed(f"sealed request too short: {len(raw)} bytes, at least {MIN_SEALED_BYTES}")
    try:
        return SealedBox(key).decrypt(raw)
    except nacl.exceptions.CryptoError:
        raise Malformed(
            "sealed request does not open with the referee's key (/game/pubkey)", Code.CANNOT_DECRYPT
        ) from None
