"""The decision: given (spec, status, observations, now), the actions to take and the next status.

Pure: no I/O, no clock, no kopf or Kubernetes client (the import-linter
contracts in pyproject.toml and tests/unit/test_layers.py check it). Called once per reconcile pass by
``streamjob_operator.handlers`` between ``reconcile.observe`` and ``k8s.act``.

Status is the write-ahead log. A disruptive step is decided together with the
status that records it (``status.operation``: kind, phase, target spec hash,
savepoint path), and the glue writes that status *before* acting, so an
operator killed at any point resumes from the recorded phase; every action is
idempotent. One phase per pass and at most one disruptive action per pass.

Split by operation, as the Flink operator splits its reconcilers. ``flow``
only dispatches: the phase picks the phase module, the operation kind picks
the ``Steps`` (context.py) its operation module owns, e.g. what follows
Stopping. Layered without circles, each layer importing only those below it
(``lint-imports``, the layers contract in pyproject.toml): flow > steady >
deletion | savepoint | suspend | upgrade > deploy | standby > restart > rollout | stopping >
conditions | repartition | strays > context. By module::

    flow       dispatch: PHASES by phase, STEPS by operation kind            flow.py
    steady     no operation: what a deployed, suspended or stopped job needs steady.py
    deploy     Deploying                                                   deploy.py
    restart    Stopping -> Waiting (restart delay) -> Deploying            restart.py
    upgrade    [Savepointing ->] Stopping -> Deploying -> [AwaitingReady]  upgrade.py (-> rollback)
      standby  Standby -> Savepointing -> Stopping -> Releasing -> [AwaitingReady]  standby.py
    rollback   Stopping -> Deploying                                       upgrade.py
    suspend    [Savepointing ->] Stopping                  (-> Suspended)  suspend.py
    resume     Deploying                                                   suspend.py
    savepoint  Savepointing                                                savepoint.py (and retention)
    delete     [Savepointing ->] Stopping           (-> finalizer removed) deletion.py
    phases     Stopping, Deploying, shared by the operations                stopping.py, rollout.py
    shared     conditions (Ready, Progressing, Degraded, Savepointing),     conditions.py, strays.py,
               stray and stuck drivers, the refused state repartition       repartition.py
"""

from __future__ import annotations

from datetime import datetime

from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import OpKind, Phase, StreamJobStatus

from ..model import Decision, Observations
from . import flow
from .context import Pass, clip, hash_text, spec_dict, spec_hash, spec_json

__all__ = ["decide", "OpKind", "Phase", "clip", "hash_text", "spec_dict", "spec_hash", "spec_json"]


def decide(spec: StreamJobSpec, status: StreamJobStatus, observations: Observations, now: datetime) -> Decision:
    """One pass of the control loop, as a value; see the module docstring."""
    p = Pass(spec, status, observations, now)
    flow.run(p)
    return p.decision()
