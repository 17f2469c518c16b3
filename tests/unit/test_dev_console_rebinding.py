"""Issue 18.13: DNS rebinding against the development console. A page of evil.example whose name
rebinds to 127.0.0.1 reaches a loopback console from the reviewer's own browser (remote address:
loopback), with `Host: evil.example:8080`. The development identity answers only a loopback Host,
and only with a loopback console URL configured (the one origin a decision may come from)."""

from __future__ import annotations

import pytest

from safesend.core.errors import ConfigurationError
from safesend.entrypoints.console import ReviewConsole
from safesend.entrypoints.reviewer_auth import Reviewer, ReviewerAuth, ReviewerAuthError, ReviewerSettings
from tests.unit.conftest import make_world
from tests.unit.test_console import SECRET, call
from tests.unit.test_reviewer_auth import env

LOCAL_URL = "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    "host", ["evil.example:8080", "evil.example", "127.0.0.1.evil.example", "localhost.evil.example", "", None]
)
def test_the_development_identity_refuses_a_foreign_host_even_from_loopback(host):
    auth = ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET, console_url=LOCAL_URL))
    headers = {} if host is None else {"Host": host}
    with pytest.raises(ReviewerAuthError, match="loopback Host"):
        auth.identify(headers, "127.0.0.1")


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "127.1.2.3"])
def test_the_development_identity_answers_a_loopback_host(host):
    auth = ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET, console_url=LOCAL_URL))
    assert auth.identify({"Host": host}, "127.0.0.1") == Reviewer("dev@localhost", "dev")


@pytest.mark.parametrize("host", ["127.0.0.1@evil.example", "localhost/x", "127.0.0.999", "[::2]", "0x7f.1"])
def test_odd_host_headers_are_not_loopback(host):
    from safesend.entrypoints.reviewer_auth import is_loopback_host

    assert not is_loopback_host(host)


def test_development_mode_needs_a_loopback_console_url():
    with pytest.raises(ConfigurationError, match="needs SAFESEND_REVIEW_CONSOLE_URL on loopback"):
        ReviewerSettings.from_env(env(dev_identity="dev@localhost", csrf_secret="s" * 40))
    with pytest.raises(ConfigurationError, match="on loopback"):
        ReviewerSettings.from_env(
            env(dev_identity="dev@localhost", csrf_secret="s" * 40, console_url="http://evil.example:8080")
        )
    settings = ReviewerSettings.from_env(env(dev_identity="dev@localhost", csrf_secret="s" * 40, console_url=LOCAL_URL))
    assert settings.console_url == LOCAL_URL


def test_a_rebound_page_cannot_read_the_console():
    """The console page (with its CSRF token) is refused to a rebound Host; the same request with
    a loopback Host is served."""
    world = make_world()
    auth = ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET, console_url=LOCAL_URL))
    world_console = ReviewConsole(lambda: world.service, lambda: auth)
    _, status, _ = call(world_console, "GET", "/review", headers={"Host": "evil.example:8080"})
    assert status == 401
    page, status, _ = call(world_console, "GET", "/review", headers={"Host": "127.0.0.1:8080"})
    assert status == 200 and "dev@localhost" in page
