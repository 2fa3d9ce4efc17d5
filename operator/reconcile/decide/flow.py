"""The shape of a pass: which module acts, given the deletion mark, the operation in progress and its phase.

Pure. Called by ``reconcile.decide.decide``. Only dispatches: a job being
deleted goes to ``deletion``, a job without an operation to ``steady``; an
operation's phase picks the phase module (``PHASES``), and the operation's kind
picks the steps that phase hands over to (``STEPS``), each owned by its
operation module. Nothing here imports from a module that imports it
(``lint-imports``: the layers contract over ``reconcile.decide``).
"""

from __future__ import annotations

from collections.abc import Callable

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind, Phase

from . import conditions, deletion, deploy, restart, rollout, savepoint, standby, steady, stopping, suspend, upgrade
from .context import Pass, Steps

STEPS: dict[OpKind, Steps] = {
    OpKind.deploy: deploy.STEPS,
    OpKind.restart: restart.STEPS,
    OpKind.upgrade: upgrade.UPGRADE,
    OpKind.rollback: upgrade.ROLLBACK,
    OpKind.suspend: suspend.SUSPEND,
    OpKind.resume: suspend.RESUME,
    OpKind.savepoint: savepoint.STEPS,
    OpKind.delete: deletion.STEPS,
}

PHASES: dict[Phase, Callable[[Pass, Steps], None]] = {
    Phase.standby: lambda p, _: standby.waiting(p),
    Phase.savepointing: lambda p, _: savepoint.savepointing(p),
    Phase.stopping: stopping.stopping,
    Phase.waiting: lambda p, _: restart.waiting(p),
    Phase.deploying: rollout.deploying,
    Phase.releasing: standby.releasing,
    Phase.awaiting_ready: lambda p, _: upgrade.awaiting_ready(p),
}


def run(p: Pass) -> None:
    conditions.record_progress(p)
    if p.obs.deleting:
        deleting(p)
    elif p.st.operation is not None:
        continue_operation(p)
    else:
        steady.steady(p)
    savepoint.retention(p)
    conditions.conditions(p)
    p.update(observed_generation=p.obs.generation)


def deleting(p: Pass) -> None:
    op = p.st.operation
    if op is None or op.kind is not OpKind.delete:
        deletion.start_deletion(p)
    elif op.phase is Phase.done:
        p.deletion_done = True
    else:
        continue_operation(p)


def continue_operation(p: Pass) -> None:
    op = p.op()
    phase = PHASES.get(Phase(op.phase)) if op.phase in Phase._value2member_map_ else None
    if phase is None:  # an unknown phase (a newer operator wrote it?): start over from what is observed
        p.emit("Warning", "OperationAbandoned", f"Unknown operation phase '{op.phase}'; re-observing")
        p.update(operation=None, state=LifecycleState.running)
        p.again(0)
        return
    # an unknown kind rolls out its target spec, as a deploy does
    phase(p, STEPS.get(op.kind, deploy.STEPS) if op.kind in OpKind._value2member_map_ else deploy.STEPS)
