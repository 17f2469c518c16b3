"""Helpers the Graph mailer tests share: a plain MIME message with a chosen Message-ID, and a
self-signed certificate as a Graph app's certificate credential needs it (PEM key and x5t thumbprint)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from cryptography.hazmat.primitives import serialization

from tests.certificates import self_signed


def plain_mime(sender: str, message_id: str) -> bytes:
    """A minimal text/plain message from ``sender`` whose Message-ID the mailer must keep."""
    return (
        f"From: {sender}\r\nTo: rcpt@example.com\r\nSubject: hi\r\nMessage-ID: {message_id}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\nbody\r\n"
    ).encode()


def self_signed_certificate() -> tuple[str, str]:
    """(PKCS#8 PEM private key, SHA-1 thumbprint of the DER certificate): what Entra's x5t names."""
    key, cert = self_signed("safesend", datetime(2020, 1, 1, tzinfo=UTC), datetime(2040, 1, 1, tzinfo=UTC))
    thumbprint = hashlib.sha1(cert.public_bytes(serialization.Encoding.DER)).hexdigest()  # noqa: S324 - x5t is SHA-1
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return pem, thumbprint
