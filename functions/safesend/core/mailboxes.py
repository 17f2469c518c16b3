"""Sender mailboxes and the pools that choose among them: server-side configuration, pure.

Why: one Gmail mailbox has per-minute and daily limits (issue 24), so a growing shop needs several,
each with its own limits, and a rule for which of them may carry a given job. A job's `from` must
be an address the mailbox may send as (its own address or a send-as alias), else Gmail would
rewrite or refuse it: that is a 400 on the `from` field before anything is stored.

The configuration is a TOML file (SAFESEND_MAILBOXES_FILE, beside channels.toml) or the same
document as JSON (SAFESEND_MAILBOXES_JSON), checked at start-up:

    [defaults]
    limits = "workspace"          # a preset name, or a table {preset = "...", messages_per_day = ...}
    safety_share = 0.95           # stop at this share of each daily limit, before Gmail refuses

    [mailboxes.shop]
    address = "shop@example.com"
    delegated_user = "shop@example.com"   # keyless domain-wide delegation, or:
    # token_secret = "gmail-token-shop"   # the Secret Manager secret of its own OAuth token
    send_as = ["orders@example.com"]

    [pools]
    default = ["shop"]                     # unset: every mailbox
    channels = {receipts = ["shop", "shop2"]}
    from = {"orders@example.com" = ["shop"], "example.com" = ["shop", "shop2"]}

Unset, there is exactly one mailbox, today's: the Gmail user of the existing settings, no limits
enforced by safesend and any `from` accepted (Gmail decides, as today).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from email.utils import parseaddr
from typing import Any

from .errors import ConfigurationError, RequestValidationError
from .graph_mailbox import GRAPH_KEYS, GraphSettings, graph_settings, mailbox_kind

MAX_RECIPIENTS_PER_MESSAGE = 100  # Gmail API, per message (Workspace Admin Help, sending limits)
DEFAULT_SAFETY_SHARE = 0.95
DEFAULT_MAILBOX_ID = "default"
_MAILBOX_ID = re.compile(r"^[a-z][a-z0-9-]{0,39}$")  # a Firestore document id and a Cloud Tasks queue name part
_DOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")


@dataclass(frozen=True)
class MailboxLimits:
    """Gmail's limits of one mailbox; None: not enforced by safesend."""

    units_per_minute: int | None = None
    messages_per_day: int | None = None
    recipients_per_day: int | None = None
    recipients_per_message: int = MAX_RECIPIENTS_PER_MESSAGE

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"limit {spec.name} must be a whole number >= 1, got {value!r}")
        if self.recipients_per_message > MAX_RECIPIENTS_PER_MESSAGE:
            raise ConfigurationError(
                f"limit recipients_per_message may not exceed Gmail's {MAX_RECIPIENTS_PER_MESSAGE}"
            )

    @property
    def unlimited(self) -> bool:
        return self.units_per_minute is None and self.messages_per_day is None and self.recipients_per_day is None


# Workspace: Admin Help "Gmail sending limits" (2,000 messages and 10,000 recipients per rolling 24 h,
# 500 messages on trial accounts) and the Gmail API quota page (6,000 units per minute per user for
# projects created on or after 2026-05-01, 15,000 before). Consumer (@gmail.com): 500 messages a day
# and 100 recipients per message are what third-party guides report (e.g. rapidevelopers.com's Gmail API
# notes); Google publishes no per-day recipient figure for them, so 500 is a cautious stand-in.
PRESETS: dict[str, MailboxLimits] = {
    "workspace": MailboxLimits(6000, 2000, 10_000),
    "workspace_legacy_rate": MailboxLimits(15_000, 2000, 10_000),
    "trial": MailboxLimits(6000, 500, 10_000),
    "consumer": MailboxLimits(6000, 500, 500),
    "unlimited": MailboxLimits(),
    # Exchange Online (service description, sending limits): 10,000 recipients per rolling day and 30
    # messages per minute, as 30 sends' units (a read's units count too: a little under 30 sends then).
    # No daily message count; 100 recipients per message is kept (Exchange allows 500).
    "exchange_online": MailboxLimits(30 * 100, None, 10_000),
}
# A mailbox of this kind with no limits of its own gets these ([defaults] limits are Gmail's).
KIND_DEFAULT_LIMITS = {"graph": "exchange_online"}


@dataclass(frozen=True)
class Mailbox:
    """One sender mailbox. `user_id` is the Gmail API userId of its calls (its address when
    delegated, `me` with its own token). `any_sender`: only the unconfigured default, as today."""

    id: str
    address: str
    user_id: str = "me"
    delegated_user: str | None = None
    token_secret: str | None = None
    send_as: frozenset[str] = frozenset()
    limits: MailboxLimits = field(default_factory=MailboxLimits)
    safety_share: float = DEFAULT_SAFETY_SHARE
    any_sender: bool = False
    kind: str = "gmail"  # or "graph": a Microsoft 365 mailbox (graph_mailbox.py), with `graph` set
    graph: GraphSettings | None = None

    def may_send_as(self, address: str) -> bool:
        """True if `address` (a bare address, any case) is this mailbox's or one of its aliases."""
        bare = address.strip().lower()
        return self.any_sender or bare == self.address or bare in self.send_as

    def day_allowance(self, limit: int | None) -> int | None:
        """What safesend lets through of a daily limit: its safety share, rounded down."""
        return None if limit is None else max(1, math.floor(limit * self.safety_share))


@dataclass(frozen=True)
class Pools:
    """Which mailboxes may carry a job: by its `from` address, else its domain, else its channel,
    else the default pool. Every list names mailbox ids, in preference order."""

    default: tuple[str, ...]
    channels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    senders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # address or domain -> ids

    def for_job(self, channel: str, sender: str | None) -> tuple[str, ...]:
        if sender:
            if sender in self.senders:
                return self.senders[sender]
            domain = sender.rsplit("@", 1)[-1]
            if domain in self.senders:
                return self.senders[domain]
        return self.channels.get(channel, self.default)


class MailboxDirectory:
    """The configured mailboxes and pools, checked once at start-up."""

    def __init__(self, mailboxes: Sequence[Mailbox], pools: Pools):
        if not mailboxes:
            raise ConfigurationError("mailboxes: none configured")
        self._mailboxes = {m.id: m for m in mailboxes}
        if len(self._mailboxes) != len(mailboxes):
            raise ConfigurationError("mailboxes: the same id twice")
        self.pools = pools
        for where, ids in [("pools.default", pools.default)] + [
            (f"pools.{kind}.{key}", ids)
            for kind, table in (("channels", pools.channels), ("from", pools.senders))
            for key, ids in table.items()
        ]:
            if not ids:
                raise ConfigurationError(f"{where}: an empty pool")
            unknown = sorted(set(ids) - set(self._mailboxes))
            if unknown:
                raise ConfigurationError(f"{where}: unknown mailbox(es) {unknown}")

    def __iter__(self) -> Any:
        return iter(self._mailboxes.values())

    def get(self, mailbox_id: str) -> Mailbox:
        try:
            return self._mailboxes[mailbox_id]
        except KeyError:
            raise ConfigurationError(f"mailbox {mailbox_id!r} is not configured") from None

    def ids(self) -> list[str]:
        return list(self._mailboxes)

    def candidates(self, channel: str, sender: str | None) -> list[Mailbox]:
        """The mailboxes of the job's pool that may send as its `from`, in the pool's order.
        RequestValidationError on `from` (HTTP 400, nothing stored) if none of them may."""
        address = bare_address(sender) if sender else None
        if sender and not address:
            raise RequestValidationError({"from": "not an email address"})
        pool = [self._mailboxes[i] for i in self.pools.for_job(channel, address)]
        if address is None:
            return pool
        allowed = [m for m in pool if m.may_send_as(address)]
        if not allowed:
            raise RequestValidationError(
                {"from": f"{address} is not an address the sender mailboxes of this job may send as"}
            )
        return allowed

    def check_channels(self, known: Iterable[str]) -> None:
        """Start-up: a pool for a channel that does not exist is a typo that would never apply."""
        unknown = sorted(set(self.pools.channels) - set(known))
        if unknown:
            raise ConfigurationError(f"pools.channels: unknown channel(s) {unknown}")

    def check_default_sender(self, sender: str | None, channels: Iterable[str]) -> None:
        """Start-up: a request without `from` gets the default sender; a channel whose pool may not
        send as it would refuse every such request."""
        if not sender:
            return
        for channel in channels:
            try:
                self.candidates(channel, sender)
            except RequestValidationError:
                raise ConfigurationError(
                    f"SAFESEND_DEFAULT_FROM: no mailbox of channel {channel!r}'s pool may send as it"
                ) from None

    # -- loading

    @classmethod
    def default(cls, address: str | None, user_id: str = "me", delegated_user: str | None = None) -> MailboxDirectory:
        """Today's single mailbox: the existing Gmail settings, nothing enforced, any `from`."""
        mailbox = Mailbox(
            DEFAULT_MAILBOX_ID,
            bare_address(address) if address else "",
            user_id=user_id,
            delegated_user=delegated_user,
            limits=PRESETS["unlimited"],
            any_sender=True,
        )
        return cls([mailbox], Pools(default=(DEFAULT_MAILBOX_ID,)))

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> MailboxDirectory:
        """`{"defaults": {...}, "mailboxes": {id: {...}}, "pools": {...}}`; ConfigurationError names the fault."""
        _only(doc, {"defaults", "mailboxes", "pools"}, "mailbox configuration")
        defaults = _table(doc.get("defaults") or {}, "defaults")
        _only(defaults, {"limits", "safety_share"}, "defaults")
        boxes = _table(doc.get("mailboxes") or {}, "mailboxes")
        mailboxes = [
            _mailbox(name, _table(values or {}, f"mailboxes.{name}"), defaults) for name, values in boxes.items()
        ]
        if not mailboxes:
            raise ConfigurationError("mailbox configuration: [mailboxes] is empty")
        pools_doc = _table(doc.get("pools") or {}, "pools")
        _only(pools_doc, {"default", "channels", "from"}, "pools")
        pools = Pools(
            default=_ids(pools_doc["default"], "pools.default") if "default" in pools_doc else tuple(boxes),
            channels={
                k: _ids(v, f"pools.channels.{k}")
                for k, v in _table(pools_doc.get("channels") or {}, "pools.channels").items()
            },
            senders={
                _sender_key(k): _ids(v, f"pools.from.{k}")
                for k, v in _table(pools_doc.get("from") or {}, "pools.from").items()
            },
        )
        return cls(mailboxes, pools)

    @classmethod
    def load(cls, settings: Any) -> MailboxDirectory:
        """From SAFESEND_MAILBOXES_FILE (TOML) or SAFESEND_MAILBOXES_JSON; neither: today's mailbox."""
        path = getattr(settings, "mailboxes_file", None)
        text = getattr(settings, "mailboxes_json", None)
        if path and text:
            raise ConfigurationError("set SAFESEND_MAILBOXES_FILE or SAFESEND_MAILBOXES_JSON, not both")
        if path:
            try:
                with open(path, "rb") as handle:
                    return cls.from_mapping(tomllib.load(handle))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigurationError(f"cannot read mailbox file {path}: {exc}") from None
        if text:
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"SAFESEND_MAILBOXES_JSON is not JSON: {exc}") from None
            return cls.from_mapping(_table(doc, "SAFESEND_MAILBOXES_JSON"))
        return cls.default(
            getattr(settings, "default_from", None),
            getattr(settings, "gmail_user", "me") or "me",
            getattr(settings, "gmail_delegated_user", None),
        )


def bare_address(text: str) -> str:
    """`Shop <Shop@Example.com>` -> `shop@example.com`; '' if there is no address in it."""
    address = parseaddr(text)[1].strip().lower()
    return address if "@" in address else ""


_MAILBOX_KEYS = {"address", "delegated_user", "token_secret", "send_as", "limits", "safety_share", "user_id"}
_GRAPH_MAILBOX_KEYS = (_MAILBOX_KEYS - {"delegated_user", "token_secret"}) | GRAPH_KEYS


def _mailbox(name: str, values: Mapping[str, Any], defaults: Mapping[str, Any]) -> Mailbox:
    where = f"mailboxes.{name}"
    if not _MAILBOX_ID.match(name):
        raise ConfigurationError(f"{where}: an id is 1-40 of a-z, 0-9 and '-', starting with a letter")
    kind = mailbox_kind(values, where)
    _only(values, _GRAPH_MAILBOX_KEYS if kind == "graph" else _MAILBOX_KEYS | {"kind"}, where)
    address = bare_address(str(values.get("address") or ""))
    if not address:
        raise ConfigurationError(f"{where}: address is required (an email address)")
    delegated, token = values.get("delegated_user"), values.get("token_secret")
    graph = graph_settings(values, where) if kind == "graph" else None
    if graph is None and bool(delegated) == bool(token):
        raise ConfigurationError(f"{where}: set exactly one of delegated_user and token_secret")
    if delegated and not bare_address(str(delegated)):
        raise ConfigurationError(f"{where}: delegated_user must be an email address")
    aliases = values.get("send_as") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and bare_address(a) for a in aliases):
        raise ConfigurationError(f"{where}: send_as must be a list of email addresses")
    share = values.get("safety_share", defaults.get("safety_share", DEFAULT_SAFETY_SHARE))
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 < share <= 1.0:
        raise ConfigurationError(f"{where}: safety_share must be a number in (0, 1], got {share!r}")
    return Mailbox(
        id=name,
        address=address,
        user_id=str(
            values.get("user_id")
            or (bare_address(str(delegated)) if delegated else None)
            or _default_user(kind, address)
        ),
        delegated_user=bare_address(str(delegated)) if delegated else None,
        token_secret=str(token) if token else None,
        send_as=frozenset(bare_address(a) for a in aliases),
        limits=_limits(values.get("limits", KIND_DEFAULT_LIMITS.get(kind) or defaults.get("limits")), where),
        safety_share=float(share),
        kind=kind,
        graph=graph,
    )


def _default_user(kind: str, address: str) -> str:
    """Gmail's "me" (its own token), or the Graph user principal name: the mailbox's address."""
    return address if kind == "graph" else "me"


def _limits(spec: Any, where: str) -> MailboxLimits:
    """A preset name, or a table of limits over an optional `preset`. Unset: an error, since a real
    mailbox without limits would be paced by nothing but Gmail's refusals."""
    if spec is None:
        raise ConfigurationError(f"{where}: limits are required: a preset {sorted(PRESETS)} or a table")
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"{where}: limits must be a preset name or a table")
    values = dict(spec)
    preset = values.pop("preset", None)
    if preset is not None and preset not in PRESETS:
        raise ConfigurationError(f"{where}: unknown limits preset {preset!r}; known: {sorted(PRESETS)}")
    base = PRESETS[preset] if preset is not None else MailboxLimits()
    _only(values, {f.name for f in fields(MailboxLimits)}, f"{where}.limits")
    try:
        return replace(base, **values)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def _ids(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{where}: a pool is a list of mailbox ids")
    if len(set(value)) != len(value):
        raise ConfigurationError(f"{where}: a mailbox twice in one pool")
    return tuple(value)


def _sender_key(key: str) -> str:
    """A `from` pool is keyed by a whole address or by a domain, in lower case."""
    lowered = key.strip().lower()
    if "@" in lowered:
        address = bare_address(lowered)
        if address:
            return address
    elif _DOMAIN.match(lowered):
        return lowered
    raise ConfigurationError(f"pools.from: {key!r} is neither an email address nor a domain")


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a table (an object)")
    return value


def _only(values: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ConfigurationError(f"{where}: unknown settings {unknown}")
