"""A self-signed RSA certificate for tests that sign as a key's owner (ID tokens, Graph's certificate
credential): one builder, so each test states only the name and validity it relies on."""

from __future__ import annotations

from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def self_signed(
    common_name: str, not_before: datetime, not_after: datetime
) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    """A fresh 2048-bit key and its self-signed certificate (serial 1, SHA-256) valid in [not_before, not_after]."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    return key, cert
