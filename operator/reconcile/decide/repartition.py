"""The one change a running job may refuse outright: a state repartition the installed runtime cannot do.

Pure. Called by ``upgrade`` (a changed spec of a running or stopped job) and
``suspend`` (resuming with a changed spec).
"""

from __future__ import annotations

import json

from streamjob_operator.api.spec import UpgradeMode

from ..changes import ChangeKind, classify
from .context import Pass, spec_dict


def refuse_repartition(p: Pass) -> bool:
    """True (and blocked, with an event) when the change needs a state repartition the runtime cannot do."""
    assert p.st.last_reconciled_spec is not None
    old = json.loads(p.st.last_reconciled_spec)
    if classify(old, spec_dict(p.spec)) is not ChangeKind.state_repartition:
        return False
    if p.spec.upgrade_mode is UpgradeMode.stateless:
        return False
    if p.spec.upgrade_mode is UpgradeMode.savepoint and p.obs.repartition_supported:
        return False
    if p.blocked():
        return True
    message = (
        f"spec.statePartitions: changing {old.get('statePartitions')} -> {p.spec.state_partitions} needs an offline "
        "state repartition from a savepoint, which the installed runtime does not support; the job keeps its "
        "current spec. Revert the change, or set upgradeMode stateless to start with fresh state."
    )
    p.block("StatePartitionsChangeRefused", message)
    p.emit("Warning", "StatePartitionsChangeRefused", message)
    return True
