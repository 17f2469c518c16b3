"""API keys: the credential n8n has built in ("Bearer Auth" / "Header Auth"), no code needed.

A key is `ssk_<key_id>_<secret>`: the key id is public (logs, rotation: several keys valid at once),
the secret is 32 random bytes, base64url. The server stores only `key_id:sha256(key)` entries
(Secret Manager in the deployment), and compares digests in constant time, so a leaked
configuration does not leak a usable key.

    python -m safesend.core.api_keys new n8n-prod     # prints the key (give it to n8n) and the entry
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigurationError

PREFIX = "ssk_"
_KEY_ID = r"[a-z0-9][a-z0-9-]{0,31}"
_KEY_RE = re.compile(rf"{PREFIX}(?P<key_id>{_KEY_ID})_(?P<secret>[A-Za-z0-9_-]{{43}})")
_ENTRY_RE = re.compile(rf"(?P<key_id>{_KEY_ID}):(?P<digest>[0-9a-f]{{64}})")
_DUMMY_DIGEST = hashlib.sha256(b"safesend: no such key id").digest()


class ApiKeyError(ValueError):
    """A presented API key that is malformed or unknown. Its text never contains the key."""


def looks_like_api_key(token: str) -> bool:
    """Bearer tokens starting with our prefix are API keys; anything else may be an ID token."""
    return token.startswith(PREFIX)


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def mint(key_id: str) -> tuple[str, str]:
    """A new key and its `key_id:digest` entry for SAFESEND_AUTH_API_KEYS."""
    if not re.fullmatch(_KEY_ID, key_id):
        raise ValueError("key id: 1-32 of a-z, 0-9 and '-', starting with a letter or digit")
    key = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    return key, f"{key_id}:{digest_of(key)}"


@dataclass(frozen=True)
class ApiKeyRing:
    """The accepted keys, by key id. Empty means API keys are not accepted."""

    digests: Mapping[str, bytes]

    @classmethod
    def parse(cls, raw: str | None, setting: str = "SAFESEND_AUTH_API_KEYS") -> ApiKeyRing:
        """`key_id:sha256hex` entries separated by commas or whitespace."""
        digests: dict[str, bytes] = {}
        for entry in re.split(r"[\s,]+", raw or ""):
            if not entry:
                continue
            match = _ENTRY_RE.fullmatch(entry)
            if match is None:
                raise ConfigurationError(
                    f"{setting}: an entry is not key_id:sha256hex "
                    "(mint one with: python -m safesend.core.api_keys new <key_id>)"
                )
            if match["key_id"] in digests:
                raise ConfigurationError(f"{setting}: key id {match['key_id']!r} is listed twice")
            digests[match["key_id"]] = bytes.fromhex(match["digest"])
        return cls(digests)

    def __bool__(self) -> bool:
        return bool(self.digests)

    def verify(self, key: str) -> str:
        """The key id of a valid key; raises ApiKeyError. Constant time in the secret."""
        match = _KEY_RE.fullmatch(key)
        if match is None:
            raise ApiKeyError("malformed API key")
        expected = self.digests.get(match["key_id"], _DUMMY_DIGEST)
        presented = hashlib.sha256(key.encode("ascii")).digest()
        if not hmac.compare_digest(presented, expected) or match["key_id"] not in self.digests:
            raise ApiKeyError("unknown or revoked API key")
        return match["key_id"]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "new":
        print("usage: python -m safesend.core.api_keys new <key_id>", file=sys.stderr)
        return 2
    key, entry = mint(argv[1])
    print(
        f"key (give it to the caller, e.g. n8n's Bearer Auth credential; shown once):\n  {key}\n"
        f"entry (append to SAFESEND_AUTH_API_KEYS / the api-keys secret):\n  {entry}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
