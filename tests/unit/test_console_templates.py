"""The console's pages are Jinja2 templates that escape every value, and its stylesheet, script and
icon are real files served as they are: no HTML is written by hand in Python, so no value can reach
a page unescaped because a call to escape it was forgotten."""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import flask

from safesend.entrypoints import console

APP = flask.Flask(__name__)
HOSTILE = """</title><script>alert("x")</script><img src=x onerror='y'> & more"""


def test_every_template_loads_with_autoescape_and_strict_variables():
    names = sorted(p.name for p in console.TEMPLATES_DIR.glob("*.html"))
    assert {"layout.html", "index.html", "item.html", "error.html", "macros.html"} <= set(names)
    environment = console._TEMPLATES
    assert environment.autoescape is True
    for name in names:
        environment.get_template(name)  # parses
    try:
        environment.from_string("{{ missing }}").render()
    except Exception as exc:  # noqa: BLE001 - StrictUndefined: a typo is an error, never an empty value
        assert "missing" in str(exc)
    else:
        raise AssertionError("an undefined template variable rendered")


def test_every_expression_is_escaped_as_html_escape_does():
    environment = console._TEMPLATES
    rendered = environment.from_string('<p title="{{ v }}">{{ v }}</p>{{ nothing }}').render(v=HOSTILE, nothing=None)
    assert rendered == f'<p title="{html.escape(HOSTILE)}">{html.escape(HOSTILE)}</p>'
    page = environment.get_template("error.html").render(
        title=HOSTILE, text=HOSTILE, reviewer=None, status=400, link=("/review?x=" + HOSTILE, HOSTILE)
    )
    assert "<script>" not in page and "<img" not in page and html.escape(HOSTILE) in page


def test_no_html_is_written_in_python():
    tree = ast.parse(Path(console.__file__).read_text(encoding="utf-8"))
    tags = re.compile(r"<(!doctype|/?[a-z][a-z0-9]*)[\s>/]", re.IGNORECASE)
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert [text for text in literals if tags.search(text)] == []
    assert "def e(" not in Path(console.__file__).read_text(encoding="utf-8")


def test_the_assets_are_the_static_files_served_as_they_are():
    service = console.ReviewConsole(lambda: None, lambda: None)  # type: ignore[arg-type, return-value]
    for path, name in (
        (console.CSS_PATH, "console.css"),
        (console.JS_PATH, "console.js"),
        (console.ICON_PATH, "icon.svg"),
    ):
        with APP.test_request_context(path, method="GET"):
            body, status, headers = service.handle(flask.request)
        assert status == 200 and body == (console.STATIC_DIR / name).read_text(encoding="utf-8")
        assert headers["Content-Security-Policy"] == console.CSP
