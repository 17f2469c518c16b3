"""tools/tf_schema_provider/install.py keeps each decoded provider schema outside the checkout, in the
user's cache: every fresh clone (CI's, the gate's) decoded the four pinned wheels again (~12 CPU-s)
while its .venv-tfplugin was new. The key is the wheel's file name and size (a PyPI file name is
never reused for other bytes) and the decoding code."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "tools" / "tf_schema_provider" / "install.py"


def load_install() -> ModuleType:
    spec = importlib.util.spec_from_file_location("safesend_tf_install_under_test", INSTALL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("xdg", [True, False])
def test_decoded_schemas_live_in_the_users_cache_not_the_checkout(tmp_path, xdg):
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    if xdg:
        env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import runpy; print(runpy.run_path({str(INSTALL)!r}, run_name='t')['DECODED'])"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    base = tmp_path / "xdg" if xdg else tmp_path / "home" / ".cache"
    assert Path(done.stdout.strip()) == base / "safesend" / "tf-schema-decoded"


def test_a_wheel_is_decoded_once_for_every_clone_and_again_when_it_differs(tmp_path, monkeypatch):
    install = load_install()
    decodes: list[str] = []
    monkeypatch.setattr(install, "provider_schema", lambda wheel: decodes.append(wheel.name) or {"from": wheel.name})
    cache = tmp_path / "cache"
    first, second = tmp_path / "clone1" / "p-1.0-py3-none-any.whl", tmp_path / "clone2" / "p-1.0-py3-none-any.whl"
    for wheel in (first, second):
        wheel.parent.mkdir()
        wheel.write_bytes(b"wheel bytes")
    assert install.decoded(first, cache) == install.decoded(second, cache) == {"from": first.name}
    assert decodes == [first.name]  # the second clone's identical wheel was read from the cache
    other = tmp_path / "clone3" / "p-2.0-py3-none-any.whl"
    other.parent.mkdir()
    other.write_bytes(b"wheel bytes")
    assert install.decoded(other, cache) == {"from": other.name} and decodes == [first.name, other.name]
