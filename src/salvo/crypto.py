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
is not UTF-8 JSON is :class:`~salvo.errors.Malformed`; a box that does not
open with the expected key is :class:`~salvo.errors.Illegal` (it parsed, but
is not from whom it must be).
"""

from __future__ import annotations

import base64
import binascii
import os
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

from salvo import codec
from salvo.errors import Illegal, Malformed

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


def open_box(key: bytes, raw: bytes, what: str, whose: str) -> bytes:
    """Open a decoded box with ``key``; Illegal when it is not ``whose``."""
    try:
        # The binding SecretBox(key).decrypt(raw) ends in, without its object
        # and encoder layers: every fire message is opened here.
        return crypto_secretbox_open_easy(raw[NONCE_BYTES:], raw[:NONCE_BYTES], key)
    except nacl.exceptions.CryptoError:
        raise Illegal(f"{what} does not open with {whose} key") from None


def unseal(key: bytes, text: str | bytes, what: str, whose: str) -> bytes:
    """Inverse of :func:`seal`: decode strictly, then open."""
    return open_box(key, decode_box(text, what), what, whose)


def sign(key: bytes, data: Any, nonce: bytes | None = None) -> dict[str, Any]:
    """A signed message of the spec: ``{"data": data, "signature": ...}``."""
    return {"data": data, "signature": seal(key, codec.dumps(data), nonce)}


def verify(key: bytes, data: Any, signature: str, whose: str = "the current player's") -> bytes:
    """Check a signed message; return the signature's 24-byte nonce (the
    replay-cache key: one byte string has several base64 spellings)."""
    raw = decode_box(signature, "signature")
    plaintext = open_box(key, raw, "signature", whose)
    # Clients sign the compact JSON of data (as sign() does): then the text is
    # byte for byte what dumps(data) gives, and that is the check. Any other
    # spelling of the same value is parsed and compared as JSON values.
    if plaintext != codec.dumps(data).encode():
        signed = codec.loads(plaintext, "signed text")
        if not codec.json_equal(signed, data):
            raise Illegal("signature does not match data")
    return raw[:NONCE_BYTES]


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


def public_key_b64(key: PrivateKey) -> str:
    return base64.b64encode(bytes(key.public_key)).decode("ascii")


def seal_to(pubkey_b64: str, text: str | bytes) -> str:
    """A sealed participation request to the referee's public key."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    pub = PublicKey(b64decode_strict(pubkey_b64, "/game/pubkey"))
    return base64.b64encode(SealedBox(pub).encrypt(data)).decode("ascii")


def open_sealed_request(key: PrivateKey, text: str | bytes) -> bytes:
    raw = b64decode_strict(text, "sealed request")
    if len(raw) < MIN_SEALED_BYTES:
        raise Malformed(f"sealed request too short: {len(raw)} bytes, at least {MIN_SEALED_BYTES}")
    try:
        return SealedBox(key).decrypt(raw)
    except nacl.exceptions.CryptoError:
        raise Malformed("sealed request does not open with the referee's key (/game/pubkey)") from None
