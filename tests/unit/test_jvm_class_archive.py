"""devstack.emulators.ClassArchive: the emulators' JVMs map a class-data-sharing archive kept in the
user's cache (Java 13+), written by the first JVM that ran without one and kept only when that JVM
ended on its own. (tests/integration/test_emulators.py shows a real JVM writing and mapping one.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.emulators import ClassArchive


def runtime(tmp_path: Path, release: str | None) -> Path:
    """A java binary in a JDK home whose `release` file says `release` (None: no such file)."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    if release is not None:
        (tmp_path / "jdk" / "release").write_text(f'IMPLEMENTOR="x"\nJAVA_VERSION="{release}"\n')
    return java


@pytest.fixture
def jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SAFESEND_JVM_CLASS_ARCHIVE", raising=False)
    path = tmp_path / "emulator.jar"
    path.write_bytes(b"classes")
    return path


def test_a_first_jvm_writes_the_archive_at_exit_and_the_next_maps_it(tmp_path, jar):
    java = runtime(tmp_path, "17.0.15")
    first = ClassArchive("firestore", java, [jar])
    [option] = first.options()
    assert option.startswith("-XX:ArchiveClassesAtExit=") and first.pending is not None
    first.pending.write_bytes(b"archive")  # what the JVM writes as it exits
    first.keep(143)  # ended after SIGTERM, on its own
    assert first.path is not None and first.path.read_bytes() == b"archive"
    assert first.path.parent == tmp_path / "cache" / "safesend" / "jvm-class-archives"
    assert ClassArchive("firestore", java, [jar]).options() == [f"-XX:SharedArchiveFile={first.path}"]


@pytest.mark.parametrize("returncode", [-9, None])
def test_a_killed_jvms_archive_is_never_kept(tmp_path, jar, returncode):
    java = runtime(tmp_path, "17.0.15")
    archive = ClassArchive("pubsub", java, [jar])
    archive.options()
    assert archive.pending is not None and archive.path is not None
    archive.pending.write_bytes(b"half an archive")
    archive.keep(returncode)
    assert not archive.path.exists() and list(archive.path.parent.iterdir()) == []
    assert archive.options()[0].startswith("-XX:ArchiveClassesAtExit=")  # the next JVM writes one again


def test_another_jar_or_runtime_gets_an_archive_of_its_own(tmp_path, jar):
    java = runtime(tmp_path, "17.0.15")
    before = ClassArchive("firestore", java, [jar]).path
    jar.write_bytes(b"other classes")
    assert ClassArchive("firestore", java, [jar]).path != before


@pytest.mark.parametrize("release", ["11.0.20", "12", None])
def test_a_runtime_older_than_13_or_unknown_gets_no_option(tmp_path, jar, release):
    """-XX:ArchiveClassesAtExit is not an option before Java 13: such a JVM would not start."""
    assert ClassArchive("firestore", runtime(tmp_path, release), [jar]).options() == []


def test_the_archive_can_be_switched_off(tmp_path, jar, monkeypatch):
    monkeypatch.setenv("SAFESEND_JVM_CLASS_ARCHIVE", "0")
    assert ClassArchive("firestore", runtime(tmp_path, "21.0.1"), [jar]).options() == []
