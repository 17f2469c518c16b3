"""Chaos helpers for the fault-storm test (tests/integration/test_fault_storm.py). Local stacks only.

What they do, and why each is safe to use on a developer machine:
- ``GroupFreezer``: SIGSTOP / SIGCONT one process group (an emulator started by LocalStack). A frozen
  emulator keeps its data, unlike a restarted one, and its clients see a dependency that hangs.
  Every group it froze is remembered, so ``thaw_all()`` in a ``finally`` never leaves a JVM stopped.
- ``kill_gunicorn_worker``: SIGKILL the one worker process of the functions server (the child of the
  ManagedProcess, which is gunicorn's master); the master keeps the listening socket and respawns it,
  like a crashed Cloud Run instance replaced by a new one.
- ``RecordingSweepTicker``: Cloud Scheduler's stand-in calling ``/sweep`` every interval, recording
  every answer and tolerating connection errors while the worker restarts.
- ``RelayCycler``: walks the fault relay through every mode in ``relay.MODES`` with small counts and
  short delays, waiting for each fault to be consumed (bounded) before the next one.
- ``ChaosRunner``: runs a timeline of process-level actions (kills, freezes) in one thread.
- ``ScriptedReviewer``: a person at the review console: lists the open items, opens one, and posts a
  decision through the console's form (its CSRF token, the console's Origin), as a browser would.
- ``ReceiverFlapper``: makes loopback receivers (devstack/receiver.py: callback receivers, the fake
  Chat / Slack webhooks) flap: down (connections closed unanswered), 5xx, 429 with Retry-After, slow
  answers within the senders' deadlines, and calm spells; ``stop()`` leaves every one up and quick.

Only processes started by this test session are signalled, always by pid / pgid. Every loop is
bounded in time and count. Standard library + ``requests``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

from .procs import children_of
from .receiver import DROP

__all__ = [
    "ChaosAction",
    "ChaosRunner",
    "GroupFreezer",
    "ReceiverFlapper",
    "RecordingSweepTicker",
    "RelayCycler",
    "ScriptedReviewer",
    "children_of",
    "find_gunicorn_worker",
    "kill_gunicorn_worker",
    "relay_mode_params",
]

NORMAL_MODE = "forward-and-respond"  # devstack.relay.NORMAL
MAX_FREEZE_S = 30.0  # no freeze may last longer than this, whatever the caller asks


def find_gunicorn_worker(master_pid: int) -> int | None:
    """The worker of a one-worker gunicorn (functions-framework's default): the master's only child."""
    children = children_of(master_pid)
    return children[0] if len(children) == 1 else (max(children) if children else None)


def kill_gunicorn_worker(
    master_pid: int, respawn_timeout_s: float = 20.0, ready: Callable[[], bool] | None = None
) -> dict[str, Any]:
    """SIGKILL the worker (waiting, bounded, for one while gunicorn respawns it) and wait (bounded)
    until gunicorn has a new one, and ``ready()`` if given.

    Returns what happened: old and new pid, seconds until respawned, or an ``error``.
    """
    started = time.monotonic()
    deadline = started + respawn_timeout_s
    # A worker that just died (a crash point, the previous kill) is being respawned: wait for it, as
    # for the new one below; on a loaded machine the respawn takes seconds.
    worker = find_gunicorn_worker(master_pid)
    while worker is None and time.monotonic() < deadline:
        time.sleep(0.05)
        worker = find_gunicorn_worker(master_pid)
    if worker is None:
        return {
            "action": "kill_worker",
            "error": f"no worker under gunicorn master {master_pid} within {respawn_timeout_s}s",
        }
    try:
        os.kill(worker, signal.SIGKILL)
    except ProcessLookupError:
        return {"action": "kill_worker", "error": f"worker {worker} already gone"}
    deadline = time.monotonic() + respawn_timeout_s
    new_worker = None
    while time.monotonic() < deadline:
        candidate = find_gunicorn_worker(master_pid)
        if candidate is not None and candidate != worker:
            new_worker = candidate
            break
        time.sleep(0.05)
    serving = ready is None
    while new_worker is not None and not serving and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            serving = ready is None or bool(ready())
        if not serving:
            time.sleep(0.1)
    result = {
        "action": "kill_worker",
        "old_pid": worker,
        "new_pid": new_worker,
        "respawn_s": round(time.monotonic() - started, 2),
    }
    if new_worker is None:
        result["error"] = f"no new worker within {respawn_timeout_s}s"
    elif not serving:
        result["error"] = f"new worker {new_worker} not serving within {respawn_timeout_s}s"
    return result


# --------------------------------------------------------------------------- freezing
class GroupFreezer:
    """SIGSTOP / SIGCONT process groups, remembering which are frozen (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frozen: dict[int, str] = {}
        self.history: list[dict[str, Any]] = []

    def freeze(self, pgid: int, name: str = "") -> None:
        if not isinstance(pgid, int) or pgid <= 1 or pgid == os.getpgid(0):
            raise ValueError(f"refusing to freeze process group {pgid!r}")
        with self._lock:
            os.killpg(pgid, signal.SIGSTOP)
            self._frozen[pgid] = name

    def thaw(self, pgid: int) -> None:
        with self._lock:
            self._frozen.pop(pgid, None)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGCONT)

    def thaw_all(self) -> None:
        """Resume every group still frozen; safe to call any number of times."""
        with self._lock:
            frozen = list(self._frozen)
        for pgid in frozen:
            self.thaw(pgid)

    @property
    def frozen(self) -> dict[int, str]:
        with self._lock:
            return dict(self._frozen)

    def freeze_for(
        self, pgid: int, seconds: float, name: str = "", stop: threading.Event | None = None
    ) -> dict[str, Any]:
        """Freeze, hold (cut short by ``stop``), thaw: always thawed, even on an exception."""
        seconds = min(max(0.0, float(seconds)), MAX_FREEZE_S)
        started = time.monotonic()
        self.freeze(pgid, name)
        try:
            if stop is not None:
                stop.wait(seconds)
            else:
                time.sleep(seconds)
        finally:
            self.thaw(pgid)
        entry = {"action": f"freeze_{name or pgid}", "pgid": pgid, "frozen_s": round(time.monotonic() - started, 2)}
        self.history.append(entry)
        return entry


# --------------------------------------------------------------------------- sweeper
class RecordingSweepTicker:
    """POST /sweep every ``interval_s`` (one at a time), recording each answer; bounded by ``max_ticks``."""

    def __init__(
        self,
        url: str,
        interval_s: float = 1.0,
        timeout_s: float = 60.0,
        max_ticks: int = 2000,
        headers: dict[str, str] | None = None,
    ):
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.max_ticks = max_ticks
        self.statuses: Counter[str] = Counter()
        self.actions: Counter[str] = Counter()
        self.five_xx: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="storm-sweep-ticker", daemon=True)

    def start(self) -> RecordingSweepTicker:
        self._thread.start()
        return self

    def _run(self) -> None:
        for _ in range(self.max_ticks):
            started = time.monotonic()
            try:
                response = requests.post(f"{self.url}/sweep", json={}, timeout=self.timeout_s, headers=self.headers)
                self.statuses[str(response.status_code)] += 1
                if response.status_code == 200:
                    with contextlib.suppress(ValueError, AttributeError):
                        for action, count in (response.json().get("actions") or {}).items():
                            self.actions[action] += int(count)
                elif response.status_code >= 500:
                    self.five_xx.append((response.status_code, response.text[:200]))
            except requests.RequestException as exc:
                self.statuses[type(exc).__name__] += 1
            if self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started))):
                return

    def stop(self, timeout_s: float = 70.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)


# --------------------------------------------------------------------------- relay
def relay_mode_params(mode: str, rng: random.Random) -> dict[str, Any]:
    """Small counts and short delays for each relay mode, so no request hangs for long.

    Delays are chosen around the stack's 2 s send timeout: a longer one makes an accepted send
    time out (ambiguous), a shorter one is merely slow. Modes this table does not know (added to
    the relay later) get a count of 1-2 and a 1 s delay.
    """
    match = "all" if rng.random() < 0.3 else "send"
    if mode == NORMAL_MODE:
        return {"mode": mode, "count": None, "match": "send", "delay_s": 0.0}
    if mode == "429-before-forward":  # rate limits come in bursts
        return {"mode": mode, "count": rng.randint(2, 8), "match": match, "delay_s": 0.0}
    if mode == "slow-response":
        return {"mode": mode, "count": rng.randint(1, 2), "match": match, "delay_s": rng.choice((0.5, 3.0))}
    if mode == "forward-then-drop-response":
        return {"mode": mode, "count": rng.randint(1, 2), "match": match, "delay_s": 3.0}
    if mode in ("fail-before-forward", "close-after-forward", "forward-then-5xx"):
        return {"mode": mode, "count": rng.randint(1, 3), "match": match, "delay_s": 0.0}
    if mode == "trickle-response":  # delay_s is per byte: ~0.1 s keeps every read far inside a socket
        # timeout, while the whole answer (a few hundred bytes) takes ~30 s; only a wall-clock deadline
        # on the client ends it sooner. stop() of the relay cuts it short.
        return {"mode": mode, "count": rng.randint(1, 2), "match": match, "delay_s": 0.1}
    return {"mode": mode, "count": rng.randint(1, 2), "match": match, "delay_s": 1.0}


class RelayCycler:
    """Walk the relay through every mode in ``modes``, each fault until consumed or ``hold_s`` passed.

    The next fault is the one the relay applied least so far (its own ``faulted`` counters), so every
    mode is exercised even when traffic is thin; every third step is a calm pause.
    """

    def __init__(
        self,
        relay: Any,
        modes: Iterable[str],
        rng: random.Random,
        gap_s: tuple[float, float] = (0.3, 0.8),
        hold_s: float = 4.0,
        max_steps: int = 1000,
    ):
        self.relay = relay
        self.modes = list(modes)
        self.rng = rng
        self.gap_s = gap_s
        self.hold_s = hold_s
        self.max_steps = max_steps
        self.set_counts: Counter[str] = Counter()
        self.log: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="storm-relay-cycler", daemon=True)

    def start(self) -> RelayCycler:
        self._thread.start()
        return self

    def _next_mode(self, step: int) -> str:
        """Every third step is calm; otherwise the fault applied least so far (ties: seeded shuffle)."""
        faults = [m for m in self.modes if m != NORMAL_MODE]
        if step % 3 == 2 or not faults:
            return NORMAL_MODE
        applied = self.relay.stats().get("faulted", {})
        self.rng.shuffle(faults)
        return min(faults, key=lambda m: applied.get(m, 0))

    def _run(self) -> None:
        started = time.monotonic()
        try:
            for step in range(self.max_steps):
                if self._stop.is_set():
                    return
                params = relay_mode_params(self._next_mode(step), self.rng)
                try:
                    self.relay.set_mode(
                        params["mode"], match=params["match"], count=params["count"], delay_s=params["delay_s"]
                    )
                except ValueError as exc:
                    self.errors.append(f"{params}: {exc}")
                    self._stop.wait(self.gap_s[0])
                    continue
                self.set_counts[params["mode"]] += 1
                self.log.append({"t": round(time.monotonic() - started, 2), **params})
                if params["count"] is None:  # the calm mode: just a pause
                    self._stop.wait(self.rng.uniform(*self.gap_s))
                    continue
                deadline = time.monotonic() + self.hold_s
                while not self._stop.is_set() and time.monotonic() < deadline:
                    if self.relay.stats()["mode"] == NORMAL_MODE:
                        break  # consumed
                    self._stop.wait(0.05)
                self.relay.set_mode(NORMAL_MODE)
                self._stop.wait(self.rng.uniform(*self.gap_s))
        finally:
            with contextlib.suppress(Exception):
                self.relay.set_mode(NORMAL_MODE)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        with contextlib.suppress(Exception):
            self.relay.set_mode(NORMAL_MODE)


# --------------------------------------------------------------------------- timeline
@dataclass(order=True)
class ChaosAction:
    at_s: float  # seconds after ChaosRunner.start()
    kind: str = field(compare=False)  # "kill_worker" | "freeze"
    target: str = field(compare=False, default="")  # for freeze: a name in ChaosRunner.groups
    seconds: float = field(compare=False, default=0.0)


class ChaosRunner:
    """Run ``actions`` in time order in one background thread; one at a time, each bounded.

    ``groups`` maps a freeze target name to a callable returning its pgid (looked up when used).
    ``functions_master_pid`` returns the gunicorn master's pid. An action starts at its time but
    never less than ``min_gap_s`` after the previous one ended (two crashes 0.1 s apart test
    nothing more). ``stop()`` cuts a freeze short and thaws everything; no further action starts after it.
    """

    def __init__(
        self,
        actions: Iterable[ChaosAction],
        *,
        groups: dict[str, Callable[[], int | None]],
        functions_master_pid: Callable[[], int | None],
        functions_ready: Callable[[], bool] | None = None,
        min_gap_s: float = 2.0,
    ):
        self.actions = sorted(actions)
        self.min_gap_s = min_gap_s
        self.groups = groups
        self.functions_master_pid = functions_master_pid
        self.functions_ready = functions_ready
        self.freezer = GroupFreezer()
        self.log: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._started = 0.0
        self._thread = threading.Thread(target=self._run, name="storm-chaos", daemon=True)

    def start(self) -> ChaosRunner:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        last_end = float("-inf")
        try:
            for action in self.actions:
                wait = max(self._started + action.at_s, last_end + self.min_gap_s) - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return
                if self._stop.is_set():
                    return
                at = round(time.monotonic() - self._started, 2)
                try:
                    entry = self._do(action)
                except Exception as exc:  # noqa: BLE001 - record, keep the storm going
                    entry = {"action": action.kind, "target": action.target, "error": repr(exc)}
                self.log.append({"t": at, **entry})
                last_end = time.monotonic()
        finally:
            self.freezer.thaw_all()

    def _do(self, action: ChaosAction) -> dict[str, Any]:
        if action.kind == "kill_worker":
            master = self.functions_master_pid()
            if master is None:
                return {"action": "kill_worker", "error": "functions server not running"}
            return kill_gunicorn_worker(master, ready=self.functions_ready)
        if action.kind == "freeze":
            pgid = self.groups[action.target]()
            if pgid is None:
                return {"action": f"freeze_{action.target}", "error": "no process group"}
            return self.freezer.freeze_for(pgid, action.seconds, action.target, self._stop)
        raise ValueError(f"unknown chaos action {action.kind!r}")

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        self.freezer.thaw_all()

    def counts(self) -> Counter[str]:
        done: Counter[str] = Counter()
        for entry in self.log:
            done[entry["action"] + (" (error)" if "error" in entry else "")] += 1
        return done


_ITEM_LINK = re.compile(r'href="/review/items/([0-9a-f]{32})"')
_HIDDEN = re.compile(r'<input type="hidden" name="(review_id|csrf)" value="([^"]*)"')
_BUTTON = re.compile(r'<button type="submit" name="decision" value="([a-z_]+)"')
DECISION_KINDS = ("resend", "mark_sent", "cancel", "acknowledge")


class ScriptedReviewer:
    """A reviewer working through the console's open items while the storm runs.

    Each pass GETs ``/review``, opens the items it has not answered (one entry, one decision), reads
    the form's review id, CSRF token and the decisions offered, and POSTs the one it has made least
    often so far (ties: seeded), with the console's Origin, exactly like the browser form. Every
    answer is recorded: the 303's ``result`` or the HTTP status. ``accept(job_id)`` limits it to the
    storm's own jobs. Bounded in passes, in items per pass and in time per request.
    """

    def __init__(
        self,
        url: str,
        rng: random.Random,
        accept: Callable[[str], bool],
        interval_s: float = 0.5,
        per_pass: int = 10,
        max_passes: int = 2000,
        timeout_s: float = 15.0,
    ):
        self.url = url.rstrip("/")
        self.rng = rng
        self.accept = accept
        self.interval_s = interval_s
        self.per_pass = per_pass
        self.max_passes = max_passes
        self.timeout_s = timeout_s
        self.decisions: list[dict[str, Any]] = []
        self.made: Counter[str] = Counter()
        self.errors: list[str] = []
        self._answered: set[str] = set()  # review ids
        self._refused: set[str] = set()  # review ids whose resend found a copy: decide again, not resend
        self._stop = threading.Event()
        self._session = requests.Session()
        self._thread = threading.Thread(target=self._run, name="storm-reviewer", daemon=True)

    def start(self) -> ScriptedReviewer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        self._session.close()

    def _refusals(self) -> set[tuple[str, str]]:
        return {("resend", review_id) for review_id in self._refused}

    def _run(self) -> None:
        for _ in range(self.max_passes):
            if self._stop.is_set():
                return
            try:
                self._pass()
            except requests.RequestException as exc:  # a worker restarting: the next pass tries again
                self.errors.append(f"connection: {type(exc).__name__}")
            self._stop.wait(self.interval_s)

    def _pass(self) -> None:
        listing = self._session.get(f"{self.url}/review", timeout=self.timeout_s)
        if listing.status_code != 200:
            self.errors.append(f"GET /review: {listing.status_code}")
            return
        job_ids = [j for j in dict.fromkeys(_ITEM_LINK.findall(listing.text)) if self.accept(j)]
        self.rng.shuffle(job_ids)
        for job_id in job_ids[: self.per_pass]:
            if self._stop.is_set():
                return
            self._decide(job_id)

    def _decide(self, job_id: str) -> None:
        page = self._session.get(f"{self.url}/review/items/{job_id}", timeout=self.timeout_s)
        if page.status_code != 200:
            self.errors.append(f"GET item {job_id}: {page.status_code}")
            return
        hidden = dict(_HIDDEN.findall(page.text))
        review_id = hidden.get("review_id")
        offered = [
            d for d in _BUTTON.findall(page.text) if d in DECISION_KINDS and (d, review_id) not in self._refusals()
        ]
        if not review_id or "csrf" not in hidden or not offered or review_id in self._answered:
            return  # decided meanwhile, or answered by us already
        fewest = min(self.made[d] for d in offered)
        decision = self.rng.choice([d for d in offered if self.made[d] == fewest])
        answer = self._session.post(
            f"{self.url}/review/items/{job_id}/decision",
            data={"review_id": review_id, "csrf": hidden["csrf"], "decision": decision, "note": "storm reviewer"},
            headers={"Origin": self.url},
            allow_redirects=False,
            timeout=self.timeout_s,
        )
        result: str | None = None
        if answer.status_code == 303:
            found = parse_qs(urlsplit(answer.headers.get("Location", "")).query).get("result")
            result = found[0] if found else None
        if result == "refused_copy_found":
            self._refused.add(review_id)  # the entry stays open: the next pass marks it sent or cancels
        else:
            self._answered.add(review_id)
        if result not in (None, "replayed"):
            self.made[decision] += 1
        self.decisions.append(
            {"job_id": job_id, "review_id": review_id, "decision": decision, "status": answer.status_code}
            | {"result": result, "t": round(time.monotonic(), 2)}
        )


# --------------------------------------------------------------------------- receivers
RECEIVER_FAULTS = ("down", "5xx", "429", "slow", "calm")
MAX_SLOW_S = 2.0  # slow, but inside every sender's deadline (callbacks 5 s, webhooks 10 s)


class ReceiverFlapper:
    """Every ``gap_s`` each receiver draws a fault of RECEIVER_FAULTS (seeded) for ``hold_s``, then
    all are up and quick again. Bounded by ``max_steps``; ``stop()`` clears every receiver."""

    def __init__(
        self,
        receivers: dict[str, Any],
        rng: random.Random,
        hold_s: tuple[float, float] = (0.5, 2.5),
        gap_s: tuple[float, float] = (0.2, 0.6),
        max_steps: int = 500,
    ):
        self.receivers = dict(receivers)
        self.rng = rng
        self.hold_s = hold_s
        self.gap_s = gap_s
        self.max_steps = max_steps
        self.counts: Counter[str] = Counter()
        self.log: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="storm-receiver-flapper", daemon=True)

    def start(self) -> ReceiverFlapper:
        self._thread.start()
        return self

    def _apply(self, receiver: Any, fault: str) -> None:
        if fault == "down":
            receiver.set_outage(DROP)
        elif fault == "5xx":
            receiver.set_outage(self.rng.choice((500, 502, 503)))
        elif fault == "429":
            receiver.set_outage(429, retry_after=self.rng.randint(1, 2))
        elif fault == "slow":
            receiver.set_delay(self.rng.uniform(0.5, MAX_SLOW_S))

    @staticmethod
    def _clear(receiver: Any) -> None:
        receiver.set_outage(None)
        receiver.set_delay(0)

    def _run(self) -> None:
        """Each step: every receiver draws its own fault (so they overlap), held, then all cleared."""
        started = time.monotonic()
        try:
            for _ in range(self.max_steps):
                if self._stop.is_set():
                    return
                drawn = {name: self.rng.choice(RECEIVER_FAULTS) for name in sorted(self.receivers)}
                for name, fault in drawn.items():
                    self._apply(self.receivers[name], fault)
                    self.counts[fault] += 1
                self.log.append({"t": round(time.monotonic() - started, 2), **drawn})
                self._stop.wait(self.rng.uniform(*self.hold_s))
                for receiver in self.receivers.values():
                    self._clear(receiver)
                self._stop.wait(self.rng.uniform(*self.gap_s))
        finally:
            for receiver in self.receivers.values():
                with contextlib.suppress(Exception):
                    self._clear(receiver)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        for receiver in self.receivers.values():
            with contextlib.suppress(Exception):
                self._clear(receiver)
