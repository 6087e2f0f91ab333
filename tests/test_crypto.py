"""Crypto of spec section 3, with fixed vectors checked against independent code."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path

import pytest
from argon2.low_level import Type, hash_secret_raw
from nacl.public import PrivateKey
from nacl.secret import SecretBox

from salvo.game.engine import Game
from salvo.game.events import Config
from salvo.spec import codec, crypto, wire
from salvo.spec.errors import Illegal, Malformed
from salvo.spec.topics import Topics

NAME, SECRET = "alice", "correct horse battery staple"
# Vectors shared with docs/protocol.md (tests/test_docs.py keeps the two in step).
# The sealed placement uses the nonce 00 01 .. 17, every signature 18 19 .. 2f.
SALT_HEX = "9d7737d092463af48d1261bb0959de36"
KEY_HEX = "a9fbe0fe6d8beea800687145cbef76802898fb658e92b1f9b1dcbd0b8cd1933f"
KEY = bytes.fromhex(KEY_HEX)
PLACEMENT = '{"coordinates":"3;4","orientation":"HORIZONTAL"}'
SEALED_PLACEMENT = (
    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXKnzIYNN18H3UY0g1hBX0XpWh6sOX6Mvdw/ByZHM3KMMNJ+"
    "NyelHHdrSeyFXjYCNZglF96ZgX50h1v0ahhlBoRQ=="
)
SIGNATURE = "GBkaGxwdHh8gISIjJCUmJygpKissLS4vlNuMOduz6yO2ev01uhd7tGZ2XvniYxrf819epvnrJHVhrOHknRE="
FIRE_DATA = {"x": 3, "y": 4, "turn": 1}
# The document's v2 example: a fire bound to its target, turn and game (the
# game id is what the engine derives for game 1 from the id key 00 01 .. 1f).
GAME_ID = "f4f2e80d6f85efdc"
BOUND_FIRE_DATA = {"x": 3, "y": 4, "target": "bob", "turn": 1, "game": GAME_ID}
BOUND_FIRE_TEXT = '{"x":3,"y":4,"target":"bob","turn":1,"game":"f4f2e80d6f85efdc"}'
BOUND_SIGNATURE = (
    "GBkaGxwdHh8gISIjJCUmJygpKissLS4vz0In9RlswATh1YaGvIF2dmZ2XvniYxrf819epvnrJGFhpaaqjlYqDi8C1gjbPMUwDbFC54Xi"
    "wcBlRt5GRurl6XENzAJ4E02wNIQpuZR+Vg=="
)


def test_salt_is_unkeyed_blake2b_16_of_context_and_name() -> None:
    expected = hashlib.blake2b(b"battleship-salvo/alice", digest_size=16).digest()
    assert crypto.team_salt(NAME) == expected
    assert expected.hex() == SALT_HEX


def test_team_key_vector_matches_libsodium_and_libargon2() -> None:
    key = crypto.derive_team_key(NAME, SECRET)
    assert key.hex() == KEY_HEX
    # libargon2 through argon2-cffi, an independent implementation: t=2, m=64 MiB, p=1
    independent = hash_secret_raw(
        SECRET.encode(),
        bytes.fromhex(SALT_HEX),
        time_cost=2,
        memory_cost=65536,
        parallelism=1,
        hash_len=32,
        type=Type.ID,
        version=19,
    )
    assert independent == key


def test_key_depends_on_name_and_secret() -> None:
    assert crypto.derive_team_key("bob", SECRET) != KEY
    assert crypto.derive_team_key(NAME, SECRET + "!") != KEY


def test_seal_vector_and_round_trip() -> None:
    assert crypto.seal(KEY, PLACEMENT, nonce=bytes(range(24))) == SEALED_PLACEMENT
    assert crypto.unseal(KEY, SEALED_PLACEMENT, "placement", "your team") == PLACEMENT.encode()
    fresh = crypto.seal(KEY, PLACEMENT)
    assert fresh != crypto.seal(KEY, PLACEMENT), "nonces must be random"
    assert crypto.unseal(KEY, fresh, "placement", "your team") == PLACEMENT.encode()


def test_tampered_ciphertext_is_illegal() -> None:
    raw = bytearray(base64.b64decode(SEALED_PLACEMENT))
    raw[30] ^= 1
    with pytest.raises(Illegal, match="does not open"):
        crypto.unseal(KEY, base64.b64encode(raw), "placement", "your team")


def test_wrong_key_is_illegal() -> None:
    with pytest.raises(Illegal, match="does not open"):
        crypto.unseal(bytes(32), SEALED_PLACEMENT, "placement", "your team")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (SEALED_PLACEMENT.replace("/", "_"), "base64"),  # url-safe alphabet
        (SEALED_PLACEMENT.rstrip("="), "base64"),  # padding missing
        (SEALED_PLACEMENT + "\n", "base64"),
        ("é" + SEALED_PLACEMENT, "base64"),
        (base64.b64encode(bytes(39)).decode(), "too short"),
    ],
)
def test_strict_decoding(text: str, reason: str) -> None:
    with pytest.raises(Malformed, match=reason):
        crypto.unseal(KEY, text, "placement", "your team")


def test_signature_vector_and_verification() -> None:
    signed = crypto.sign(KEY, FIRE_DATA, nonce=bytes(range(24, 48)))
    assert signed == {"data": FIRE_DATA, "signature": SIGNATURE}
    assert crypto.verify(KEY, FIRE_DATA, SIGNATURE) == bytes(range(24, 48))


def test_bound_fire_vector_is_what_the_code_and_plain_pynacl_produce() -> None:
    assert codec.dumps(BOUND_FIRE_DATA) == BOUND_FIRE_TEXT
    signed = crypto.sign(KEY, BOUND_FIRE_DATA, nonce=bytes(range(24, 48)))
    assert signed == {"data": BOUND_FIRE_DATA, "signature": BOUND_SIGNATURE}
    # the same bytes from PyNaCl alone, as a team would compute them
    box = SecretBox(KEY).encrypt(BOUND_FIRE_TEXT.encode(), bytes(range(24, 48)))
    assert base64.b64encode(bytes(box)).decode() == BOUND_SIGNATURE
    assert crypto.verify(KEY, BOUND_FIRE_DATA, BOUND_SIGNATURE) == bytes(range(24, 48))
    assert wire.parse_fire(wire.parse_signed(signed).data).model_dump() == BOUND_FIRE_DATA


def test_bound_fire_vector_names_the_id_of_game_1() -> None:
    game = Game(Config(), Topics(), seed=0, id_key=bytes(range(32)))
    assert game.game_no == 1 and game.game_id == GAME_ID


def test_signature_ignores_key_order_and_white_space() -> None:
    text = '{ "turn": 1,\n "y": 4, "x": 3 }'
    sig = crypto.seal(KEY, text)
    assert crypto.verify(KEY, {"x": 3, "y": 4, "turn": 1}, sig)
    assert crypto.verify(KEY, json.loads('{"y":4,"turn":1,"x":3}'), sig)


@pytest.mark.parametrize(
    "data",
    [{"x": 3, "y": 5, "turn": 1}, {"x": 3, "y": 4}, {"x": 3, "y": 4, "turn": True}, [3, 4]],
)
def test_signature_must_match_data_as_json_value(data: object) -> None:
    with pytest.raises(Illegal, match="does not match"):
        crypto.verify(KEY, data, SIGNATURE)


def test_true_is_not_one_in_signatures() -> None:
    sig = crypto.seal(KEY, '{"x":1,"y":true}')
    with pytest.raises(Illegal):
        crypto.verify(KEY, {"x": 1, "y": 1}, sig)


@pytest.mark.parametrize(("plaintext", "reason"), [(b"\xff\xfe", "not UTF-8"), (b"x=3", "invalid JSON")])
def test_signed_text_must_be_utf8_json(plaintext: bytes, reason: str) -> None:
    with pytest.raises(Malformed, match=reason):
        crypto.verify(KEY, {"x": 1}, crypto.seal(KEY, plaintext))


def test_forged_signature_with_another_key() -> None:
    forged = crypto.sign(crypto.derive_team_key("mallory", "m"), FIRE_DATA)
    with pytest.raises(Illegal, match="does not open"):
        crypto.verify(KEY, forged["data"], forged["signature"])


def test_replay_key_is_the_nonce_bytes_not_the_base64_text() -> None:
    # Changing the unused low bits of the last base64 character spells the same
    # bytes differently; both spellings must map to one nonce.
    raw = base64.b64decode(SIGNATURE)
    assert len(raw) % 3 != 0
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    stem, last, pad = SIGNATURE.rstrip("=")[:-1], SIGNATURE.rstrip("=")[-1], "=" * SIGNATURE.count("=")
    variant = stem + alphabet[alphabet.index(last) | 1] + pad
    assert variant != SIGNATURE and base64.b64decode(variant) == raw
    assert crypto.verify(KEY, FIRE_DATA, variant) == crypto.verify(KEY, FIRE_DATA, SIGNATURE)


def test_referee_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "referee.key"
    key = crypto.load_or_create_referee_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = crypto.load_or_create_referee_key(path)
    assert bytes(again) == bytes(key)
    assert crypto.public_key_b64(again) == crypto.public_key_b64(key)


def test_sealed_request_round_trip_and_wrong_key() -> None:
    key = PrivateKey.generate()
    sealed = crypto.seal_to(crypto.public_key_b64(key), '{"name":"alice","secret":"s"}')
    assert crypto.open_sealed_request(key, sealed) == b'{"name":"alice","secret":"s"}'
    with pytest.raises(Malformed, match="does not open"):
        crypto.open_sealed_request(PrivateKey.generate(), sealed)
    with pytest.raises(Malformed, match="too short"):
        crypto.open_sealed_request(key, base64.b64encode(bytes(47)))
