"""Salted password hashes in RabbitMQ's format (`rabbit_password_hashing_sha256`).

A stored hash is base64(salt + SHA-256(salt + UTF-8 password)) with 4 random salt
bytes, exactly what `rabbitmqctl export_definitions` writes as `password_hash`, so
definitions move between Warren and RabbitMQ unchanged. Plain passwords are never stored.

Hashing and checking passwords is the broker's job, so it lives in the core (auth.py
checks logins with it): the metadata store only keeps the hashes it is given
(storage.metadata.PasswordHash) and never reads them, which keeps storage free of
broker imports and the core free of storage imports. A port would have served too, but
the core needs the hash itself for the default user every Broker starts with.
"""

import base64
import hashlib
import hmac
import secrets

SHA256_ALGORITHM = "rabbit_password_hashing_sha256"
SALT_LENGTH = 4


def hash_password(password: str) -> str:
    """A new salted hash of `password`, base64 text."""
    salt = secrets.token_bytes(SALT_LENGTH)
    return base64.b64encode(salt + _digest(salt, password)).decode("ascii")


def verify_password(password: str, password_hash: str,
                    algorithm: str = SHA256_ALGORITHM) -> bool:
    """True when `password` matches `password_hash` (constant-time comparison)."""
    if algorithm != SHA256_ALGORITHM or not password_hash:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt, expected = raw[:SALT_LENGTH], raw[SALT_LENGTH:]
    if len(salt) != SALT_LENGTH:
        return False
    return hmac.compare_digest(_digest(salt, password), expected)


def _digest(salt: bytes, password: str) -> bytes:
    return hashlib.sha256(salt + password.encode("utf-8")).digest()
