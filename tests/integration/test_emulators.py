"""The local emulators really work with the official clients, stay on loopback, and stop cleanly.

These guard the dev stack itself: if one fails, every other integration test
would fail for the wrong reason, so the messages here point at the emulator.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.emulators import (
    JVM_OPTIONS,
    CloudTasksEmulator,
    Emulator,
    EmulatorMissingError,
    FirestoreEmulator,
    ManagedProcess,
    ProcessStartError,
    PubSubEmulator,
    start_all,
)
from tests.loopback_http import LoopbackHttpServer, QuietHandler

pytestmark = pytest.mark.integration

DELIVERY_TIMEOUT_S = 20.0


# ----------------------------------------------------------------------------- helpers


def _tcp_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _live_group_members(pgid: int) -> list[int]:
    """Non-zombie pids in a process group (zombies can linger: PID 1 here does not reap orphans)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _pgrep(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-fa", pattern], capture_output=True, text=True, timeout=10)
    return [line for line in out.stdout.splitlines() if line.strip()]


def _non_loopback_addresses() -> list[str]:
    """This machine's non-loopback, non-link-local addresses (from `hostname -I` and the routing table)."""
    found: set[str] = set()
    if shutil.which("hostname"):
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            found.update(out.stdout.split())
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:  # UDP connect sends nothing; it only asks the kernel for the source address
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))
                found.add(sock.getsockname()[0])
        except OSError:
            pass
    result = []
    for text in sorted(found):
        try:
            addr = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            continue
        if not (addr.is_loopback or addr.is_link_local or addr.is_unspecified):
            result.append(str(addr))
    return result


_SS_PID = re.compile(r"pid=(\d+)")


def _listen_addresses(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP listen socket owned by pid, from `ss -ltnp`."""
    out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True, timeout=10, check=True)
    result = []
    for line in out.stdout.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 6 or pid not in {int(p) for p in _SS_PID.findall(line)}:
            continue
        host, _, port = cols[3].rpartition(":")
        result.append((host.strip("[]"), int(port)))
    return result


def _proc_listen_addresses(port: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP listen socket on `port`, from /proc/net/tcp{,6} (no `ss` needed)."""
    result = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state = cols[1], cols[3]
            address_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:  # 0A = LISTEN
                continue
            raw = bytes.fromhex(address_hex)
            # the kernel prints each 32-bit word in host (little-endian) order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, width, 4))
            address = ipaddress.ip_address(packed)
            mapped = getattr(address, "ipv4_mapped", None)
            result.append((str(mapped or address), port))
    return result


def _is_loopback(host: str) -> bool:
    host = host.split("%", 1)[0]
    if host.lower().startswith("::ffff:"):
        host = host[7:]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*" and friends mean every interface
        return False


def _assert_stopped(emulator: Emulator, pid: int, pgid: int, port: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert not _tcp_open("127.0.0.1", port), f"port {port} still accepts connections after stop()"
    assert not Path(f"/proc/{pid}").exists()
    leftovers = _pgrep(rf"--port[= ]{port}( |$)")
    assert leftovers == [], f"processes left behind by {emulator.name}: {leftovers}"


# ----------------------------------------------------------------------------- Firestore


def test_firestore_write_read_transaction_reset(
    firestore_emulator: FirestoreEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import firestore

    project = "demo-emulator-smoke"  # own project: reset() below must not wipe other tests' data
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    client = firestore.Client(project=project)
    try:
        ref = client.collection("smoke").document(uuid.uuid4().hex)
        ref.set({"n": 1, "label": "héllo"})
        assert ref.get().to_dict() == {"n": 1, "label": "héllo"}

        @firestore.transactional
        def increment(transaction: Any) -> int:
            snapshot = ref.get(transaction=transaction)
            new = snapshot.get("n") + 1
            transaction.update(ref, {"n": new})
            return new

        assert increment(client.transaction()) == 2
        assert ref.get().get("n") == 2
        with pytest.raises(AlreadyExists):
            ref.create({"n": 0})

        firestore_emulator.reset(project)
        assert not ref.get().exists
    finally:
        client.close()


# ----------------------------------------------------------------------------- Pub/Sub


def test_pubsub_publish_pull_with_attributes(pubsub_emulator: PubSubEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud import pubsub_v1

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.host)
    project = pubsub_emulator.project
    suffix = uuid.uuid4().hex[:12]
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        assert publisher.transport.kind == "grpc" and subscriber.transport.kind == "grpc"
        topic = publisher.topic_path(project, f"smoke-topic-{suffix}")
        subscription = subscriber.subscription_path(project, f"smoke-sub-{suffix}")
        publisher.create_topic(name=topic, timeout=30)
        subscriber.create_subscription(name=subscription, topic=topic, timeout=30)

        message_id = publisher.publish(topic, b'{"k": 1}', event="sent", attempt="1").result(timeout=30)

        received: list[Any] = []
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while not received and time.monotonic() < deadline:
            response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
            received.extend(response.received_messages)
        assert len(received) == 1, "published message was not pulled in time"
        message = received[0].message
        assert message.message_id == message_id
        assert message.data == b'{"k": 1}'
        assert dict(message.attributes) == {"event": "sent", "attempt": "1"}
        subscriber.acknowledge(subscription=subscription, ack_ids=[received[0].ack_id], timeout=30)
    finally:
        subscriber.close()
        publisher.stop()
        publisher.transport.close()


# ----------------------------------------------------------------------------- Cloud Tasks


class _Recorder(QuietHandler):
    received: queue.Queue[dict[str, Any]]

    def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.put({"at": time.time(), "path": self.path, "headers": dict(self.headers.items()), "body": body})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def task_target() -> Iterator[tuple[str, queue.Queue[dict[str, Any]]]]:
    """A tiny HTTP server on 127.0.0.1 that records every request."""
    received: queue.Queue[dict[str, Any]] = queue.Queue()
    handler = type("Recorder", (_Recorder,), {"received": received})
    with LoopbackHttpServer(handler, "task-target") as server:
        yield server.url, received


def test_tasks_http_task_delivered_on_schedule(
    tasks_emulator: CloudTasksEmulator, task_target: tuple[str, queue.Queue[dict[str, Any]]]
) -> None:
    from google.cloud import tasks_v2
    from google.protobuf import timestamp_pb2

    base_url, received = task_target
    client = tasks_emulator.client()
    try:
        queue_id = f"smoke-{uuid.uuid4().hex[:12]}"
        queue_name = tasks_emulator.queue_path(queue_id)
        client.create_queue(parent=tasks_emulator.location_path, queue={"name": queue_name}, timeout=10)
        assert queue_name in [q.name for q in client.list_queues(parent=tasks_emulator.location_path, timeout=10)]

        schedule_at = time.time() + 1.0
        schedule_time = timestamp_pb2.Timestamp()
        schedule_time.FromDatetime(dt.datetime.fromtimestamp(schedule_at, tz=dt.UTC))
        task = client.create_task(
            parent=queue_name,
            task={
                "http_request": {
                    "http_method": tasks_v2.HttpMethod.POST,
                    "url": f"{base_url}/tasks/send?x=1",
                    "headers": {"Content-Type": "application/json", "X-Safesend-Test": "yes"},
                    "body": b'{"message_id": "m-1"}',
                },
                "schedule_time": schedule_time,
            },
            timeout=10,
        )
        assert task.name.startswith(f"{queue_name}/tasks/")

        try:
            hit = received.get(timeout=DELIVERY_TIMEOUT_S)
        except queue.Empty:
            pytest.fail(f"task not delivered within {DELIVERY_TIMEOUT_S}s; emulator log: {tasks_emulator.log_path}")
        headers = {k.lower(): v for k, v in hit["headers"].items()}
        assert hit["path"] == "/tasks/send?x=1"
        assert hit["body"] == b'{"message_id": "m-1"}'
        assert headers["content-type"] == "application/json"
        assert headers["x-safesend-test"] == "yes"
        # The emulator sends the full queue path here; Cloud Tasks sends the short id.
        assert headers["x-cloudtasks-queuename"].rsplit("/", 1)[-1] == queue_id
        assert headers["x-cloudtasks-taskname"] == task.name.rsplit("/", 1)[-1]
        assert headers["x-cloudtasks-taskretrycount"] == "0"
        assert headers["x-cloudtasks-taskexecutioncount"] == "0"
        assert "x-cloudtasks-tasketa" in headers
        assert hit["at"] >= schedule_at - 0.05, "task dispatched before its schedule_time"
        assert hit["at"] <= schedule_at + 10, "task dispatched far too late"
        # A 200 answer completes the task: no second delivery.
        with pytest.raises(queue.Empty):
            received.get(timeout=0.5)
    finally:
        client.transport.close()


# ----------------------------------------------------------------------------- isolation


@pytest.mark.parametrize("fixture_name", ["tasks_emulator", "firestore_emulator", "pubsub_emulator"])
def test_emulator_listens_on_loopback_only(fixture_name: str, request: pytest.FixtureRequest) -> None:
    emulator: Emulator = request.getfixturevalue(fixture_name)
    addresses = _non_loopback_addresses()
    for address in addresses:
        assert not _tcp_open(address, emulator.port), (
            f"{emulator.name} emulator is reachable on non-loopback address {address}:{emulator.port}"
        )
    if shutil.which("ss"):
        assert emulator.pid is not None
        listeners = _listen_addresses(emulator.pid)
        assert emulator.port in {port for _, port in listeners}, f"ss does not show port {emulator.port}: {listeners}"
        exposed = [(host, port) for host, port in listeners if not _is_loopback(host)]
        assert exposed == [], f"{emulator.name} listens beyond loopback: {exposed}"
    listeners = _proc_listen_addresses(emulator.port)
    assert listeners, f"no listen socket on port {emulator.port} in /proc/net/tcp*"
    exposed = [(host, port) for host, port in listeners if not _is_loopback(host)]
    assert exposed == [], f"{emulator.name} listens beyond loopback: {exposed}"


@pytest.mark.parametrize("fixture_name", ["firestore_emulator", "pubsub_emulator"])
def test_the_emulator_jvms_run_with_the_light_jit_and_collector(
    fixture_name: str, request: pytest.FixtureRequest
) -> None:
    """C1 only, one compiler thread, the serial collector: half the Firestore emulator's CPU in a
    storm phase. Read from the running JVM's own command line (Pub/Sub's wrapper passes JAVA_OPTS)."""
    emulator: Emulator = request.getfixturevalue(fixture_name)
    assert emulator.pid is not None
    argv = Path(f"/proc/{emulator.pid}/cmdline").read_bytes().decode().split("\0")
    main = next(i for i, arg in enumerate(argv) if arg in ("-cp", "-jar"))  # the JVM's options end there
    assert set(JVM_OPTIONS) <= set(argv[:main]), argv[:main]


def test_a_callers_java_opts_come_after_ours_so_they_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_OPTS", "-XX:+UseParallelGC")
    options = PubSubEmulator().process_env()["JAVA_OPTS"].split()
    assert options[: len(JVM_OPTIONS)] == list(JVM_OPTIONS) and options[-1] == "-XX:+UseParallelGC"


def test_the_first_start_makes_the_class_archive_and_every_jvm_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine's first Firestore emulator makes the archive with a warm-up JVM before it starts; it
    then runs with the archive mapped into its memory, as does the next one, and they answer."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for _ in range(2):
        emulator = FirestoreEmulator(log_dir=tmp_path / "logs").start()
        try:
            assert emulator.archive is not None and emulator.archive.path is not None
            archive = emulator.archive.path
            assert archive.is_file() and archive.parent.parent == tmp_path / "cache" / "safesend"
            argv = Path(f"/proc/{emulator.pid}/cmdline").read_bytes().decode().split("\0")
            assert f"-XX:SharedArchiveFile={archive}" in argv and not [a for a in argv if "ArchiveClassesAtExit" in a]
            assert str(archive) in Path(f"/proc/{emulator.pid}/maps").read_text()  # the JVM mapped it
            emulator.reset("demo-archive")  # and serves
        finally:
            emulator.stop()
    assert not [p for p in archive.parent.iterdir() if p.suffix not in (".jsa", ".lock")]  # no temporary file


# ----------------------------------------------------------------------------- lifecycle


_FACTORIES: dict[str, Callable[[Path], Emulator]] = {
    "firestore": lambda log_dir: FirestoreEmulator(log_dir=log_dir),
    "pubsub": lambda log_dir: PubSubEmulator(log_dir=log_dir),
    "tasks": lambda log_dir: CloudTasksEmulator(log_dir=log_dir),
}


@pytest.mark.parametrize("kind", sorted(_FACTORIES))
def test_stop_removes_the_whole_process_group(kind: str, emulator_log_dir: Path) -> None:
    emulator = _FACTORIES[kind](emulator_log_dir)
    emulator.start()
    try:
        pid, pgid, port = emulator.pid, emulator.pgid, emulator.port
        assert pid is not None and pgid == pid, "emulator must lead its own process group"
        assert emulator.startup_seconds is not None and emulator.startup_seconds < emulator.startup_timeout
        assert _tcp_open("127.0.0.1", port)
        if kind in ("firestore", "pubsub"):
            # The pid we signal must be the JVM itself (the pubsub wrapper script execs java).
            assert Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    finally:
        emulator.stop()
    _assert_stopped(emulator, pid, pgid, port)
    emulator.stop()  # idempotent


def test_start_all_stack_starts_and_stops_everything(emulator_log_dir: Path) -> None:
    with start_all(log_dir=emulator_log_dir / "stack") as stack:
        env = stack.env()
        assert set(env) == {"FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "SAFESEND_TASKS_EMULATOR_HOST"}
        assert all(value.startswith("127.0.0.1:") for value in env.values())
        running = [(e, e.pid, e.pgid, e.port) for e in stack.emulators]
        assert all(e.is_running() for e, *_ in running)
    for emulator, pid, pgid, port in running:
        assert pid is not None and pgid is not None
        _assert_stopped(emulator, pid, pgid, port)


# ----------------------------------------------------------------------------- failure reporting


def test_wait_ready_reports_early_exit_with_log_tail(tmp_path: Path) -> None:
    proc = ManagedProcess(
        [sys.executable, "-c", "print('boom-marker'); raise SystemExit(3)"], name="crasher", log_dir=tmp_path
    )
    with proc, pytest.raises(ProcessStartError) as excinfo:
        proc.wait_ready(lambda: False, timeout=30)
    message = str(excinfo.value)
    assert "exited with code 3" in message
    assert "boom-marker" in message
    assert str(proc.log_path) in message


def test_wait_ready_timeout_reports_running_process(tmp_path: Path) -> None:
    proc = ManagedProcess(
        [sys.executable, "-c", "import time; print('waiting-marker', flush=True); time.sleep(60)"],
        name="sleeper",
        log_dir=tmp_path,
    )
    with proc:
        proc.wait_ready(lambda: "waiting-marker" in proc.log_path.read_text(), timeout=30)
        started = time.monotonic()
        with pytest.raises(ProcessStartError) as excinfo:
            proc.wait_ready(lambda: False, timeout=0.5)
        assert time.monotonic() - started < 5
    message = str(excinfo.value)
    assert "still running" in message and "waiting-marker" in message
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pgid or -1, 0)


@pytest.mark.parametrize("leader_ignores_term", [True, False], ids=["leader-ignores-term", "child-only-ignores-term"])
def test_stop_escalates_to_sigkill_and_reaches_children(tmp_path: Path, leader_ignores_term: bool) -> None:
    # The child always ignores SIGTERM (SIG_IGN survives exec); the leader may or may not.
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"if not {leader_ignores_term}: signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "print('ready-marker', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = ManagedProcess([sys.executable, "-c", script], name="stubborn", log_dir=tmp_path, stop_timeout=0.5)
    proc.start()
    try:
        proc.wait_ready(lambda: "ready-marker" in proc.log_path.read_text(), timeout=30)
        pgid = proc.pgid
        assert pgid is not None
        deadline = time.monotonic() + 10
        while len(_live_group_members(pgid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_live_group_members(pgid)) == 2
    finally:
        started = time.monotonic()
        proc.stop()
    assert time.monotonic() - started < 5
    assert proc.returncode == -(signal.SIGKILL if leader_ignores_term else signal.SIGTERM)
    assert _live_group_members(pgid) == []


_ORPHAN_SCRIPT = """
import sys, time
from devstack.emulators import FirestoreEmulator, ManagedProcess
kind, log_dir = sys.argv[1], sys.argv[2]
if kind == "firestore":
    pgid = FirestoreEmulator(log_dir=log_dir).start().pgid
else:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    pgid = ManagedProcess(sleeper, name="orphan", log_dir=log_dir).start().pgid
print(pgid, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("kind", ["plain", "firestore"])
def test_watchdog_stops_group_when_owner_is_killed(kind: str, tmp_path: Path) -> None:
    repo_root = Path(__file__).resolve().parents[2]
    owner = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, kind, str(tmp_path)],
        cwd=repo_root,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(owner.stdout.readline() if owner.stdout else ""))
        reader.start()
        reader.join(timeout=60)
        assert line and line[0].strip().isdigit(), f"owner did not start its child; logs in {tmp_path}"
        pgid = int(line[0])
        assert _live_group_members(pgid), "managed process group should be running"
    finally:
        os.killpg(owner.pid, signal.SIGKILL)  # no stop(), no atexit: only the watchdog can clean up
        owner.wait(timeout=10)
    deadline = time.monotonic() + 30
    while _live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _live_group_members(pgid) == [], f"group {pgid} outlived its owner; logs in {tmp_path}"


def test_missing_installations_fail_loudly(tmp_path: Path) -> None:
    with pytest.raises(EmulatorMissingError, match="google-cloud-cli-firestore-emulator") as firestore_error:
        FirestoreEmulator(sdk_root=tmp_path, log_dir=tmp_path).start()
    expected_jar = tmp_path / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
    assert str(expected_jar) in str(firestore_error.value)
    with pytest.raises(EmulatorMissingError, match="google-cloud-cli-pubsub-emulator"):
        PubSubEmulator(sdk_root=tmp_path, log_dir=tmp_path).start()
    with pytest.raises(EmulatorMissingError, match=r"scripts/bootstrap\.sh"):
        CloudTasksEmulator(venv=tmp_path / "no-venv", log_dir=tmp_path).start()
    with pytest.raises(ValueError):
        CloudTasksEmulator(max_retries=-1)
