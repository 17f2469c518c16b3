"""infra/README.md's one-time gcloud set-up grants each secret to exactly the functions the deploy
mounts it on (env_spec.json): a mount its account cannot read fails the deploy, and a grant to a
function that never mounts it widens who can read a credential.

Found by the messengers review: the reviewers' webhook URLs were granted to fn-notify only, while
the spec mounts them on reconcile, sweep, notify and review (retries and a decision's answer post
notices too), so a gcloud deploy with a Chat or Slack webhook could not start those functions.
"""

from __future__ import annotations

import json
import re

import pytest

from .support import INFRA, MODULE

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

GRANT = re.compile(r"gcloud secrets add-iam-policy-binding \$pfx-([a-z0-9-]+) --member=\"\$\(sa fn-(\$f|[a-z]+)\)\"")
LOOP = re.compile(r"\bfor f in ([a-z ]+); do")
PROSE = re.compile(r"\$pfx-([a-z0-9-]+), accessor for ((?:fn-[a-z]+(?:, | and )?)+)")
AS_RECONCILE = re.compile(r"exactly as for fn-reconcile above \(([^)]*)\)")
REVIEWERS_TOO = "# and notify review with _REVIEWERS=true"


def mounted() -> dict[str, set[str]]:
    """Secret id (as the README writes it after $pfx-) -> the functions the deploy mounts it on."""
    spec = json.loads((MODULE / "env_spec.json").read_text())
    out: dict[str, set[str]] = {}
    for entry in [*spec["secrets"].values(), *spec["secret_files"].values()]:
        out.setdefault(entry["secret"].replace("_", "-"), set()).update(entry["functions"])
    return out


def granted(text: str) -> dict[str, set[str]]:
    """Secret id -> the functions the README's commands (and their commented optional forms) grant it to."""
    grants: dict[str, set[str]] = {}
    loop: list[str] = []
    inherit: list[tuple[list[str], list[str]]] = []  # (functions, secrets) granted "as fn-reconcile"
    for raw in text.splitlines():
        line = raw.lstrip("# ").rstrip()
        opened = LOOP.search(line)
        if opened:
            loop = opened.group(1).split() + (["notify", "review"] if REVIEWERS_TOO in raw else [])
        for secret, who in GRANT.findall(line):
            grants.setdefault(secret, set()).update(loop if who == "$f" else [who])
        for secret, who in PROSE.findall(line):
            grants.setdefault(secret, set()).update(re.findall(r"fn-([a-z]+)", who))
        if found := AS_RECONCILE.search(line):
            inherit.append((list(loop), re.findall(r"\b([a-z]+(?:-[a-z]+)+)\b", found.group(1))))
        if line == "done" or (opened and line.endswith("; done")):
            loop = []
    for functions, secrets in inherit:
        for secret in secrets:
            if "reconcile" in grants.get(secret, set()):
                grants[secret].update(functions)
    return grants


def test_the_parser_reads_each_form_the_readme_uses():
    text = "\n".join(
        [
            'for f in send status; do gcloud secrets add-iam-policy-binding $pfx-a-b --member="$(sa fn-$f)" --x; done',
            'gcloud secrets add-iam-policy-binding $pfx-c-d --member="$(sa fn-review)" --x',
            "for f in send reconcile; do   # and notify review with _REVIEWERS=true",
            '  gcloud secrets add-iam-policy-binding $pfx-e-f --member="$(sa fn-$f)" --x',
            "done",
            "# only with _X: $pfx-g-h, accessor for fn-send, fn-reconcile and fn-sweep",
            "for f in notify; do",
            "  # Gmail, callbacks: exactly as for fn-reconcile above (token creator on itself / g-h)",
            "done",
        ]
    )
    assert granted(text) == {
        "a-b": {"send", "status"},
        "c-d": {"review"},
        "e-f": {"send", "reconcile", "notify", "review"},
        "g-h": {"send", "reconcile", "sweep", "notify"},
    }


def test_every_secret_is_granted_to_exactly_the_functions_that_mount_it():
    grants = granted((INFRA / "README.md").read_text())
    spec = mounted()
    named = {secret for secret in spec if secret in grants}
    assert named >= {"webhook-hmac", "gmail-credentials", "review-csrf", "notify-chat-webhook", "callback-hmac"}
    wrong = {
        secret: (sorted(grants[secret]), sorted(spec[secret])) for secret in named if grants[secret] != spec[secret]
    }
    assert not wrong, f"README grants (left) differ from the deploy's mounts (right): {wrong}"
