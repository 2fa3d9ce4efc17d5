"""Deploy: the first deploy of a job, and its steps.

Pure. Called by ``steady`` for a job never deployed (and by ``suspend`` for a
job created suspended, on resume); the Deploying phase itself is ``rollout``.
"""

from __future__ import annotations

from streamjob_operator.api.spec import DesiredState, UpgradeMode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind, Operation, Phase

from . import restart, rollout
from .context import Pass, Steps, spec_hash, spec_json


def first_deploy(p: Pass) -> None:
    if p.spec.state is DesiredState.suspended:
        p.update(state=LifecycleState.suspended, last_reconciled_spec=spec_json(p.spec))
        p.emit("Normal", "Suspended", "Created suspended: no driver deployed until spec.state is running")
        return
    initial = p.spec.initial_savepoint_path
    op = Operation(
        kind=OpKind.deploy,
        phase=Phase.deploying,
        target_spec_hash=spec_hash(p.spec),
        savepoint_path=initial,
        restore_mode=UpgradeMode.savepoint if initial else UpgradeMode.stateless,
        started_at=p.t(),
        message=f"first deploy, restoring savepoint {initial}" if initial else "first deploy",
    )
    p.emit("Normal", "Deploying", f"Deploying the job{f' from savepoint {initial}' if initial else ''}")
    rollout.enter_deploying(p, op, spec_json(p.spec))


STEPS = Steps(
    after_stopping=rollout.deploy_target,
    started=rollout.started,
    exited_while_starting=restart.exited_while_starting,
    not_started=restart.not_started,
)
