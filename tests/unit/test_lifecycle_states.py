"""The lifecycle vocabulary (streamjob_contract.lifecycle): every state says what it means and whether it is settled."""

from __future__ import annotations

import pytest

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind


@pytest.mark.parametrize("state", list(LifecycleState), ids=str)
def test_every_state_has_a_description(state: LifecycleState) -> None:
    assert state.description.strip()


@pytest.mark.parametrize("state, terminal", [
    pytest.param(LifecycleState.running, True, id="Running"),
    pytest.param(LifecycleState.suspended, True, id="Suspended"),
    pytest.param(LifecycleState.failed, True, id="Failed"),
    pytest.param(LifecycleState.finished, True, id="Finished"),
    pytest.param(LifecycleState.deploying, False, id="Deploying"),
    pytest.param(LifecycleState.upgrading, False, id="Upgrading"),
    pytest.param(LifecycleState.restarting, False, id="Restarting"),
    pytest.param(LifecycleState.rolling_back, False, id="RollingBack"),
    pytest.param(LifecycleState.suspending, False, id="Suspending"),
    pytest.param(LifecycleState.deleting, False, id="Deleting"),
])
def test_terminal_states_are_the_settled_ones(state: LifecycleState, terminal: bool) -> None:
    assert state.terminal is terminal


def test_a_state_is_its_string_on_the_wire() -> None:
    """The CLI compares status.state as the API server returns it (a str) against the enum."""
    assert {"state": "Running"}["state"] == LifecycleState.running
    assert f"{LifecycleState.rolling_back}" == "RollingBack"


KINDS = [
    pytest.param(OpKind.deploy, LifecycleState.deploying, "Deploying", id="deploy"),
    pytest.param(OpKind.restart, LifecycleState.restarting, "Restarting", id="restart"),
    pytest.param(OpKind.upgrade, LifecycleState.upgrading, "Upgrading", id="upgrade"),
    pytest.param(OpKind.rollback, LifecycleState.rolling_back, "RollingBack", id="rollback"),
    pytest.param(OpKind.suspend, LifecycleState.suspending, "Suspending", id="suspend"),
    pytest.param(OpKind.resume, LifecycleState.deploying, "Resuming", id="resume"),
    pytest.param(OpKind.savepoint, LifecycleState.running, "Savepointing", id="savepoint-keeps-running"),
    pytest.param(OpKind.delete, LifecycleState.deleting, "Deleting", id="delete"),
]


@pytest.mark.parametrize("kind, state, reason", KINDS)
def test_an_operation_kind_says_the_jobs_state_and_progress_reason(kind: OpKind, state: LifecycleState, reason: str) -> None:
    assert (kind.lifecycle_state, kind.progress_reason) == (state, reason)


def test_the_table_covers_every_operation_kind() -> None:
    assert {case.values[0] for case in KINDS} == set(OpKind)
