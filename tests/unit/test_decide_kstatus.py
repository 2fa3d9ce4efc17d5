"""Truth table for the kstatus conditions (Ready, Reconciling, Stalled) that decide() sets.

kstatus (sigs.k8s.io/cli-utils, read by Flux) reports Failed on Stalled=True,
InProgress on Reconciling=True or Ready=False, Current on Ready=True; at most
one of Reconciling and Stalled is True. tests/gitops runs kstatus itself on
objects captured from the test bed.
"""

from __future__ import annotations

import pytest
from test_decide import BASE, NEW_IMAGE, NOT_READY, NOW, UPGRADE_SP, failed, make_spec, obs, pod, running, with_op

from streamjob_operator.api.spec import StreamJobSpec
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import BlockedChange, StreamJobStatus
from streamjob_operator.reconcile.decide import decide, spec_hash
from streamjob_operator.reconcile.model import Observations

Verdict = dict[str, tuple[str, str]]  # condition type -> (status, reason)


@pytest.mark.parametrize(
    "spec, status, observed, expected",
    [
        pytest.param(BASE, running(), obs(pod()),
                     {"Ready": ("True", "Running"), "Reconciling": ("False", "Reconciled"), "Stalled": ("False", "AsExpected")},
                     id="running and ready: Current"),
        pytest.param(BASE, StreamJobStatus(), obs(job=None),
                     {"Ready": ("False", "Deploying"), "Reconciling": ("True", "Deploying"), "Stalled": ("False", "AsExpected")},
                     id="first deploy: Reconciling"),
        pytest.param(BASE, running(ready=False), obs(pod(), job=NOT_READY),
                     {"Ready": ("False", "Starting"), "Reconciling": ("True", "Starting"), "Stalled": ("False", "AsExpected")},
                     id="driver up without a completed batch: Reconciling"),
        pytest.param(NEW_IMAGE, running(), obs(pod()),
                     {"Reconciling": ("True", "Upgrading"), "Stalled": ("False", "AsExpected")},
                     id="spec change: the upgrade savepoint makes it Reconciling"),
        pytest.param(make_spec(savepointNonce=1), running(), obs(pod()),
                     {"Reconciling": ("True", "Savepointing"), "Stalled": ("False", "AsExpected")},
                     id="manual savepoint: Reconciling"),
        pytest.param(make_spec(restartPolicy={"type": "FixedDelay", "delaySeconds": 30, "maxRestarts": 3}), running(),
                     obs(failed(), job=None),
                     {"Ready": ("False", "Restarting"), "Reconciling": ("True", "Restarting"), "Stalled": ("False", "AsExpected")},
                     id="driver failed, restart scheduled: Reconciling"),
        pytest.param(make_spec(restartPolicy={"type": "Never"}), running(), obs(failed(message="OOM"), job=None),
                     {"Ready": ("False", "Failed"), "Reconciling": ("False", "Stalled"), "Stalled": ("True", "RestartPolicyExhausted")},
                     id="restart policy exhausted: Stalled (kstatus Failed, was InProgress forever)"),
        pytest.param(NEW_IMAGE,
                     running(driver_pod="wc-driver-3", driver_epoch=3,
                             blocked_change=BlockedChange(spec_hash=spec_hash(NEW_IMAGE), reason="RolledBack", message="rolled back")),
                     obs(pod("wc-driver-3")),
                     {"Ready": ("True", "Running"), "Reconciling": ("False", "Stalled"), "Stalled": ("True", "RolledBack")},
                     id="rolled back: the old spec runs ready but the current generation is Stalled"),
        pytest.param(NEW_IMAGE,
                     with_op(running(state=LifecycleState.rolling_back, ready=False),
                             kind="rollback", phase="Stopping", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
                     obs(job=None),
                     {"Reconciling": ("False", "Stalled"), "Stalled": ("True", "RollingBack")},
                     id="rolling back: Stalled already"),
        pytest.param(make_spec(state="suspended"), StreamJobStatus(), obs(job=None),
                     {"Ready": ("True", "Suspended"), "Reconciling": ("False", "Reconciled"), "Stalled": ("False", "AsExpected")},
                     id="suspended as asked: Current"),
        pytest.param(make_spec(state="suspended"),
                     StreamJobStatus(state=LifecycleState.suspended, observedGeneration=2,
                                     blockedChange=BlockedChange(spec_hash=spec_hash(NEW_IMAGE), reason="RolledBack", message="x")),
                     obs(job=None),
                     {"Ready": ("True", "Suspended"), "Reconciling": ("False", "Reconciled"), "Stalled": ("False", "AsExpected")},
                     id="a rolled-back change reverted in the edit that suspends: no longer Stalled"),
        pytest.param(make_spec(state="suspended"), running(), obs(pod()),
                     {"Ready": ("True", "Running"), "Reconciling": ("True", "Suspending"), "Stalled": ("False", "AsExpected")},
                     id="suspending: Reconciling while the driver still runs"),
    ],
)
def test_kstatus_conditions(spec: StreamJobSpec, status: StreamJobStatus, observed: Observations, expected: Verdict) -> None:
    st = decide(spec, status, observed, NOW).status
    got = {c.type: (c.status, c.reason) for c in st.conditions if c.type in expected}
    assert got == expected
    abnormal = [c.type for c in st.conditions if c.type in ("Reconciling", "Stalled") and c.status == "True"]
    assert len(abnormal) <= 1
    assert all(c.observed_generation == observed.generation for c in st.conditions)
