"""devstack.emulators.ClassArchive: the emulators' JVMs map a class-data-sharing archive kept in the
user's cache (Java 13+), made once per machine by one warm-up JVM (writing it costs a JVM ~2.7 CPU-s
more) under a file lock, and kept only when that JVM ended on its own. (tests/integration/
test_emulators.py shows a real JVM making one and the next mapping it.)"""

from __future__ import annotations

import fcntl
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


class WarmUp:
    """A stand-in for Emulator._make_archive: writes what a JVM writes at exit, ends with `status`."""

    def __init__(self, status: int | None = 143, writes: bytes = b"archive") -> None:
        self.status, self.writes, self.calls = status, writes, []

    def __call__(self, options: list[str]) -> int | None:
        self.calls.append(options)
        [option] = options
        assert option.startswith("-XX:ArchiveClassesAtExit=")
        Path(option.split("=", 1)[1]).write_bytes(self.writes)
        return self.status


def test_one_warm_up_jvm_makes_the_archive_and_every_jvm_maps_it(tmp_path, jar):
    java = runtime(tmp_path, "17.0.15")
    archive = ClassArchive("firestore", java, [jar])
    assert archive.options() == []  # none yet: a JVM starts as it always did
    warm_up = WarmUp()
    archive.ensure(warm_up)
    assert archive.path is not None and archive.path.read_bytes() == b"archive"
    assert archive.path.parent == tmp_path / "cache" / "safesend" / "jvm-class-archives"
    assert sorted(p.name for p in archive.path.parent.iterdir()) == [archive.path.name, f"{archive.path.stem}.lock"]
    again = ClassArchive("firestore", java, [jar])
    again.ensure(warm_up)
    assert len(warm_up.calls) == 1  # made once
    assert again.options() == [f"-XX:SharedArchiveFile={archive.path}"]


@pytest.mark.parametrize("warm_up", [WarmUp(status=-9), WarmUp(status=None), WarmUp(writes=b"")])
def test_a_warm_up_killed_or_writing_nothing_leaves_no_archive(tmp_path, jar, warm_up):
    archive = ClassArchive("pubsub", runtime(tmp_path, "17.0.15"), [jar])
    archive.ensure(warm_up)
    assert archive.path is not None and not archive.path.exists()
    assert not [p for p in archive.path.parent.iterdir() if p.suffix != ".lock"]  # no half-written file kept
    assert archive.options() == []


def test_a_warm_up_that_fails_to_start_is_reported_never_raised(tmp_path, jar, capsys):
    def broken(options: list[str]) -> int | None:
        raise OSError("no java")

    archive = ClassArchive("firestore", runtime(tmp_path, "17.0.15"), [jar])
    archive.ensure(broken)
    assert archive.options() == [] and "no JVM class archive" in capsys.readouterr().err


def test_while_another_process_makes_it_a_start_waits_then_goes_on_without(tmp_path, jar, monkeypatch):
    archive = ClassArchive("firestore", runtime(tmp_path, "17.0.15"), [jar])
    assert archive.path is not None
    archive.path.parent.mkdir(parents=True)
    monkeypatch.setattr(ClassArchive, "LOCK_WAIT_S", 0.5)
    warm_up = WarmUp()
    with open(archive.path.with_suffix(".lock"), "a") as held:  # another process is making it
        fcntl.flock(held, fcntl.LOCK_EX)
        archive.ensure(warm_up)
    assert warm_up.calls == [] and archive.options() == []


def test_another_jar_or_runtime_gets_an_archive_of_its_own(tmp_path, jar):
    java = runtime(tmp_path, "17.0.15")
    before = ClassArchive("firestore", java, [jar]).path
    jar.write_bytes(b"other classes")
    assert ClassArchive("firestore", java, [jar]).path != before


@pytest.mark.parametrize("release", ["11.0.20", "12", None])
def test_a_runtime_older_than_13_or_unknown_gets_no_archive(tmp_path, jar, release):
    """-XX:ArchiveClassesAtExit is not an option before Java 13: such a JVM would not start."""
    archive = ClassArchive("firestore", runtime(tmp_path, release), [jar])
    warm_up = WarmUp()
    archive.ensure(warm_up)
    assert warm_up.calls == [] and archive.options() == []


def test_the_archive_can_be_switched_off(tmp_path, jar, monkeypatch):
    monkeypatch.setenv("SAFESEND_JVM_CLASS_ARCHIVE", "0")
    archive = ClassArchive("firestore", runtime(tmp_path, "21.0.1"), [jar])
    warm_up = WarmUp()
    archive.ensure(warm_up)
    assert warm_up.calls == [] and archive.options() == []


def test_a_cache_that_cannot_be_written_leaves_no_archive_and_raises_nothing(tmp_path, jar, monkeypatch, capsys):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    archive = ClassArchive("firestore", runtime(tmp_path, "17.0.15"), [jar])
    warm_up = WarmUp()
    archive.ensure(warm_up)
    assert warm_up.calls == [] and archive.options() == [] and "no JVM class archive" in capsys.readouterr().err
