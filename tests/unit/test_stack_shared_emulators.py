"""LocalStack on emulators its caller owns (the fault storm starts them once for every phase): each
stack lives in its own project, and stopping it releases that project but never the emulators."""

from __future__ import annotations

from typing import Any

from devstack.stack import PROJECT, QUEUE_ID, LocalStack, StackConfig


class FakeTasksClient:
    def __init__(self) -> None:
        self.created: list[str] = []
        self.deleted: list[str] = []

    def create_queue(self, parent: str, queue: dict[str, Any]) -> None:
        assert queue["name"].startswith(parent + "/queues/")
        self.created.append(queue["name"])

    def delete_queue(self, name: str) -> None:
        self.deleted.append(name)


class FakeEmulator:
    def __init__(self, name: str, client: FakeTasksClient) -> None:
        self.name = name
        self.pgid = None
        self.host = f"127.0.0.1:{len(name)}"
        self._client = client
        self.resets: list[str] = []

    def client(self) -> FakeTasksClient:
        return self._client

    def reset(self, project: str) -> None:
        self.resets.append(project)

    def env(self) -> dict[str, str]:
        return {f"{self.name.upper()}_EMULATOR_HOST": self.host}


class FakeEmulatorStack:
    """What a caller-owned EmulatorStack offers a LocalStack; records whether anyone stopped it."""

    def __init__(self) -> None:
        self.client = FakeTasksClient()
        self.firestore = FakeEmulator("firestore", self.client)
        self.pubsub = FakeEmulator("pubsub", self.client)
        self.tasks = FakeEmulator("tasks", self.client)
        self.started = 0
        self.stopped = 0

    @property
    def emulators(self) -> tuple[FakeEmulator, ...]:
        return (self.firestore, self.pubsub, self.tasks)

    def start(self) -> FakeEmulatorStack:
        self.started += 1
        return self

    def stop(self) -> None:
        self.stopped += 1

    def env(self) -> dict[str, str]:
        return {k: v for e in self.emulators for k, v in e.env().items()}


POOL = {"mailboxes": {"shop": {"address": "shop@safesend.localhost"}}}


def test_each_stack_names_only_its_own_project() -> None:
    shared = FakeEmulatorStack()
    a = LocalStack(StackConfig(project="demo-a", mailboxes=POOL), shared)  # type: ignore[arg-type]
    b = LocalStack(StackConfig(project="demo-b"), shared)  # type: ignore[arg-type]
    env_a, env_b = a.service_env(), b.service_env()
    assert env_a["GOOGLE_CLOUD_PROJECT"] == "demo-a" and env_b["GOOGLE_CLOUD_PROJECT"] == "demo-b"
    assert env_a["SAFESEND_TASKS_QUEUE"] == f"projects/demo-a/locations/us-central1/queues/{QUEUE_ID}"
    assert env_a["SAFESEND_MAILBOX_QUEUE_PREFIX"].startswith("projects/demo-a/")
    assert env_b["SAFESEND_REVIEW_TOPIC"].startswith("projects/demo-b/topics/")
    assert b.subscription_path.startswith("projects/demo-b/") and b.notify_subscription_path.startswith(
        "projects/demo-b/"
    )
    assert env_a["FIRESTORE_EMULATOR_HOST"] == shared.firestore.host


def test_stopping_a_stack_releases_its_project_but_never_the_shared_emulators() -> None:
    shared = FakeEmulatorStack()
    stack = LocalStack(StackConfig(project="demo-a", mailboxes=POOL), shared)  # type: ignore[arg-type]
    stack.stop()
    assert shared.stopped == 0 and shared.started == 0
    assert sorted(shared.client.deleted) == sorted(
        [stack.queue_path, "projects/demo-a/locations/us-central1/queues/safesend-mbx-shop"]
    )
    assert shared.firestore.resets == ["demo-a"]


def test_a_stack_without_shared_emulators_owns_and_stops_its_own() -> None:
    stack = LocalStack(StackConfig())
    assert stack.project == PROJECT and stack.emulators.tasks.queues == [stack.queue_path]
    owned = FakeEmulatorStack()
    stack.emulators = owned  # type: ignore[assignment]
    stack.stop()
    assert owned.stopped == 1 and owned.client.deleted == [] and owned.firestore.resets == []
