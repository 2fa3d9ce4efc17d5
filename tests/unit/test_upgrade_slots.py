"""The bound on concurrent upgrades: a changed job waits for a slot (decide), and who holds one (slots).

decide: with no slot free, a running job's changed spec is not rolled out; the job keeps
running, Progressing and Reconciling say UpgradeQueued, an event says it once, and the
upgrade starts on the first pass with a slot. A restartNonce, a failure and a suspend are
not held back. slots: at most N jobs hold one, the last one cannot be taken twice by passes
on two workers, and a restarted operator counts the upgrades its watch shows.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_decide import BASE, NEW_IMAGE, NOW, Expect, check, failed, make_spec, obs, pod, running

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind, Operation, Phase, StreamJobStatus
from streamjob_operator.main import build_parser
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.model import Decision
from streamjob_operator.slots import DEFAULT_LIMIT, UpgradeSlots, holds

QUEUED = {"Progressing": ("True", "UpgradeQueued"), "Reconciling": ("True", "UpgradeQueued"), "Ready": ("True", "Running")}


def test_a_changed_job_waits_for_a_slot_and_keeps_running() -> None:
    first = decide(NEW_IMAGE, running(), obs(pod(), upgrade_slot=False), NOW)
    check(first, Expect(state=LifecycleState.running, op=None, actions=[], events=["UpgradeQueued"], requeue=2.0,
                        conditions=QUEUED))
    assert "image" in next(e.message for e in first.events)
    again = decide(NEW_IMAGE, first.status, obs(pod(), upgrade_slot=False), NOW)
    check(again, Expect(state=LifecycleState.running, op=None, actions=[], events=[], conditions=QUEUED))
    assert again.status == first.status  # nothing to write while it waits: no status patch per pass
    freed = decide(NEW_IMAGE, again.status, obs(pod()), NOW)
    check(freed, Expect(state=LifecycleState.upgrading, op=("upgrade", "Savepointing"), events=["Upgrading"],
                        conditions={"Progressing": ("True", "Upgrading")}))


@pytest.mark.parametrize(("spec", "status", "observed", "expect"), [
    pytest.param(make_spec(restartNonce=1), running(), obs(pod(), upgrade_slot=False),
                 Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["Restarting"]),
                 id="a-restartNonce-is-not-an-upgrade"),
    pytest.param(NEW_IMAGE, running(), obs(failed(), job=None, upgrade_slot=False),
                 Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["DriverFailed"]),
                 id="a-failed-driver-restarts-while-its-change-waits"),
    pytest.param(make_spec(state="suspended", image=NEW_IMAGE.image), running(), obs(pod(), upgrade_slot=False),
                 Expect(state=LifecycleState.suspending, op=("suspend", "Savepointing")),
                 id="a-suspend-is-not-held-back"),
    pytest.param(BASE, running(), obs(pod(), upgrade_slot=False),
                 Expect(state=LifecycleState.running, op=None, actions=[], events=[],
                        conditions={"Progressing": ("False", "Reconciled")}),
                 id="an-unchanged-job-is-not-queued"),
])
def test_what_is_not_held_back(spec, status, observed, expect) -> None:  # type: ignore[no-untyped-def]
    check(decide(spec, status, observed, NOW), expect)


def upgrading(key: str) -> Decision:
    op = Operation(kind=OpKind.upgrade, phase=Phase.stopping, message=key)
    return Decision(status=StreamJobStatus(state=LifecycleState.upgrading, operation=op))


IDLE = Decision(status=StreamJobStatus(state=LifecycleState.running))
UPGRADING_BODY = {"status": {"operation": {"kind": "upgrade", "phase": "Savepointing"}}}


def ask(slots: UpgradeSlots, key: str, wants: bool = True, written: bool = True) -> bool:
    """One pass of job ``key`` that starts (or keeps) an upgrade when its slot is free; True when it did.
    ``written``: its status write succeeded (the glue then calls ``released``)."""
    decision = slots.decide_with_slot(("ns", key), lambda free: upgrading(key) if free and wants else IDLE)
    if written:
        slots.released(("ns", key))
    return decision.status.operation is not None


def test_at_most_n_jobs_hold_a_slot_and_an_ended_upgrade_frees_one() -> None:
    slots = UpgradeSlots(2)
    assert [ask(slots, k) for k in "abc"] == [True, True, False]
    assert ask(slots, "a")  # a holder's next pass keeps its slot at the bound
    assert not ask(slots, "c")
    ask(slots, "a", wants=False)  # a's upgrade ended
    assert ask(slots, "c") and slots.in_use() == 2


def test_an_ended_upgrade_frees_its_slot_only_once_its_status_is_written() -> None:
    """Else another job's upgrade, written first, shows the API one upgrade more than the bound."""
    slots = UpgradeSlots(1)
    assert ask(slots, "a")
    ask(slots, "a", wants=False, written=False)  # a's upgrade ended; the write of that status failed (or is not done)
    assert not ask(slots, "b") and slots.in_use() == 1
    assert ask(slots, "a")  # a's next pass: still upgrading, by its status; it keeps its slot
    ask(slots, "a", wants=False)  # ended, and written this time
    assert ask(slots, "b")


def test_no_bound_with_zero() -> None:
    slots = UpgradeSlots(0)
    assert all(ask(slots, str(k)) for k in range(50))


def test_the_last_slot_goes_to_one_of_many_passes_on_many_workers() -> None:
    slots, start = UpgradeSlots(3), threading.Barrier(16)

    def one(key: int) -> bool:
        start.wait() if key < 16 else None
        return ask(slots, f"job-{key}")

    with ThreadPoolExecutor(16) as pool:
        started = list(pool.map(one, range(64)))
    assert sum(started) == 3 and slots.in_use() == 3


def test_a_restarted_operator_counts_the_upgrades_its_watch_shows() -> None:
    slots = UpgradeSlots(1)
    slots.saw(("ns", "a"), UPGRADING_BODY)  # mid-upgrade when the operator restarted; not passed yet
    assert not ask(slots, "b")
    ask(slots, "a", wants=False)  # a's first pass: its upgrade had ended
    slots.saw(("ns", "a"), UPGRADING_BODY)  # a late watch event of an older version: a's own decisions count now
    assert ask(slots, "b")


def test_a_deleted_job_gives_its_slot_back() -> None:
    slots = UpgradeSlots(1)
    assert ask(slots, "a") and not ask(slots, "b")
    slots.saw(("ns", "a"), UPGRADING_BODY, deleted=True)
    assert ask(slots, "b")
    slots.forget(("ns", "b"))
    assert slots.in_use() == 0


def test_the_operator_flag() -> None:
    assert build_parser().parse_args([]).max_concurrent_upgrades == DEFAULT_LIMIT
    assert build_parser().parse_args(["--max-concurrent-upgrades", "0"]).max_concurrent_upgrades == 0


@pytest.mark.parametrize("kind", list(OpKind))
def test_a_watched_body_and_a_decided_status_hold_a_slot_for_the_same_kinds(kind: OpKind) -> None:
    """One rule (slots.holding) for both: the watch's copy of a job counts as its own decision would."""
    slots = UpgradeSlots(0)
    slots.saw(("ns", "a"), {"status": {"operation": {"kind": kind.value, "phase": "Stopping"}}})
    expected = holds(StreamJobStatus(operation=Operation(kind=kind, phase=Phase.stopping)))
    assert slots.in_use() == int(expected)
    assert expected is (kind in (OpKind.upgrade, OpKind.rollback))


@pytest.mark.parametrize("body", [
    pytest.param({}, id="no-status"),
    pytest.param({"status": {}}, id="no-operation"),
    pytest.param({"status": {"operation": None}}, id="operation-null"),
    pytest.param({"status": {"operation": "upgrade"}}, id="operation-not-an-object"),
    pytest.param({"status": {"operation": {"phase": "Stopping"}}}, id="no-kind"),
])
def test_a_watched_body_without_an_upgrade_holds_no_slot(body: dict[str, object]) -> None:
    slots = UpgradeSlots(0)
    slots.saw(("ns", "a"), body)
    assert slots.in_use() == 0
