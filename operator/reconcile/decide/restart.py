"""Restart: a driver that exited without a request, the restart policy, and the wait before a restart.

Pure. Called by ``steady`` when the current driver has exited, by the upgrade
module for restartNonce, and, through every operation's ``Steps``, when a new
driver exits or does not start (the restart policy decides what happens next).
"""

from __future__ import annotations

from streamjob_contract.exitcodes import ExitCode
from streamjob_operator.api.spec import UpgradeMode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import MAX_FAILURE_TIMES, OpKind, Operation, Phase

from ..model import DeleteDriver, DriverPod
from ..policy import JOB_POLL_SECONDS, describe_policy, fmt_time, parse_time, restart_delay
from . import rollout
from .context import Pass, Steps, clip


def driver_exited(p: Pass, pod: DriverPod) -> None:
    kind = pod.exit_kind
    if kind is None:  # not `or`: ExitCode.FINISHED is 0, falsy
        kind = ExitCode.FINISHED if pod.exit_code == 0 else ExitCode.FAILED
    code = pod.exit_code
    detail = f": {pod.message}" if pod.message else ""
    if kind is ExitCode.FINISHED:
        p.update(state=LifecycleState.finished, last_error=None)
        p.emit("Normal", "JobFinished", f"Driver {pod.name} ended by itself (exit {code}): the query finished")
        return
    if kind.clean_stop:
        p.emit("Warning", "DriverStopped",
               f"Driver {pod.name} stopped without a request from the operator (exit {code}, {kind.reason}); "
               "restarting from the latest checkpoint (not counted as a failure)")
        start_restart(p, f"driver stopped (exit {code})")
        return
    if kind.permanent:
        fail(p, kind.reason, f"Driver {pod.name} exited with {kind.reason} (exit {code}), which a restart cannot fix{detail}")
        return
    count_failure(p, pod.name, f"failed (exit {code}){detail}", error=pod.message or f"exit code {code}",
                  why=f"driver failed (exit {code})")


def driver_unreachable(p: Pass, pod: DriverPod) -> bool:
    """A ready driver whose control endpoint stopped answering ``restartPolicy.driverUnreachableSeconds`` ago
    (its node lost, frozen or cut off): deleted with grace 0 and replaced, counted as a failure. True when so.

    Only a driver that answered since it was created counts (before that, readiness and its timeout govern),
    and only after this pass could not reach it either. The silence is counted from the operator's first
    unanswered poll (``JobProgress.unanswered_since``) plus at most one poll interval before it, never from
    the last answer alone: a pass that comes late (an overloaded operator) is not a lost node. The old driver may still run where the operator cannot
    see it: its replacement takes the next epoch of the checkpoint, which fences it (exit FENCED at its next
    commit), and the kubelet, if it comes back, ends it because its pod is gone."""
    limit = p.spec.restart_policy.driver_unreachable_seconds
    if limit <= 0 or p.obs.job is None or p.obs.job.reachable or p.running_driver() is not pod:
        return False
    seen = parse_time(p.st.job.observed_at) if p.st.job is not None else None
    deployed = parse_time(p.st.deployed_at)
    if seen is None or (deployed is not None and seen < deployed):
        return False
    # the silence the operator witnessed: from its first unanswered poll, plus at most one poll interval before
    # it. An operator too busy to ask for minutes (a backlog of passes) has not seen minutes of silence: its
    # late pass's first failed call starts the count instead of deleting a driver that may be answering fine.
    since = p.obs.job.unanswered_since or p.now
    silent = (p.now - since).total_seconds() + min(max(0.0, (since - seen).total_seconds()), JOB_POLL_SECONDS)
    if silent < limit:
        p.again(min(5.0, limit - silent))
        return False
    p.actions.append(DeleteDriver(pod.name, grace_seconds=0))
    # its node may still be Ready (the node controller's grace period is longer): the replacement avoids it
    count_failure(p, pod.name, f"has not answered its control endpoint for {silent:.0f}s (spec.restartPolicy."
                  f"driverUnreachableSeconds={limit}; its node{f' {pod.node}' if pod.node else ''} is probably lost "
                  "or cut off): deleted it with grace 0",
                  error=f"driver unreachable for {silent:.0f}s", reason="DriverUnreachable", why="driver unreachable",
                  avoid_node=pod.node)
    return True


def count_failure(p: Pass, pod: str, what: str, error: str | None = None, reason: str = "DriverFailed", why: str | None = None,
                  avoid_node: str | None = None) -> None:
    """A failure the restart policy counts: restart after its delay, or fail when it is used up."""
    times = [t for t in (parse_time(x) for x in p.st.failure_times) if t is not None] + [p.now]
    times = times[-MAX_FAILURE_TIMES:]
    policy = p.spec.restart_policy
    delay = restart_delay(policy, p.st.restart_count, times, p.now)
    p.update(failure_times=[fmt_time(t) for t in times], last_error=clip(error or what))
    if delay is None:
        fail(p, "RestartPolicyExhausted", f"Driver {pod} {what}; {describe_policy(policy)}, which are used up")
        return
    batch = p.st.last_checkpoint.batch_id if p.st.last_checkpoint else None
    p.update(
        restart_count=p.st.restart_count + 1,
        total_restarts=p.st.total_restarts + 1,
        next_restart_at=p.t(delay),
    )
    p.emit("Warning", reason,
           f"Driver {pod} {what}; restart {p.st.restart_count} in {delay:g}s "
           f"from the latest checkpoint{f' (batch {batch})' if batch is not None else ''}")
    start_restart(p, why or clip(f"driver {what}", 200), counted=True, avoid_node=avoid_node)


def fail(p: Pass, reason: str, message: str) -> None:
    p.update(state=LifecycleState.failed, operation=None, last_error=clip(message), next_restart_at=None)
    p.failure = (reason, message)
    p.emit("Warning", reason, message)


def start_restart(p: Pass, why: str, counted: bool = False, avoid_node: str | None = None) -> None:
    p.update(
        operation=Operation(kind=OpKind.restart, phase=Phase.stopping, restore_mode=UpgradeMode.last_state,
                            started_at=p.t(), message=clip(why), avoid_node=avoid_node),
        state=LifecycleState.restarting,
        last_restart_nonce=p.spec.restart_nonce,
    )
    if not counted:
        p.update(next_restart_at=None)
    p.again(0)


def stopped(p: Pass) -> None:
    """The old driver is gone: wait out the restart delay, then deploy the last reconciled spec again."""
    if p.st.next_restart_at and not p.past(p.st.next_restart_at):
        p.op_update(phase=Phase.waiting)
        at = parse_time(p.st.next_restart_at)
        assert at is not None
        p.again(max(0.0, (at - p.now).total_seconds()))
    else:
        assert p.st.last_reconciled_spec is not None
        rollout.enter_deploying(p, p.op(), p.st.last_reconciled_spec)


def waiting(p: Pass) -> None:
    if p.past(p.st.next_restart_at) or p.st.next_restart_at is None:
        assert p.st.last_reconciled_spec is not None
        rollout.enter_deploying(p, p.op(), p.st.last_reconciled_spec)
        return
    at = parse_time(p.st.next_restart_at)
    assert at is not None
    p.again(max(0.0, (at - p.now).total_seconds()))


def exited_while_starting(p: Pass, pod: DriverPod) -> None:
    """A new driver exited before it ran: the operation ends, and the next pass applies the restart policy."""
    p.update(operation=None, state=LifecycleState.running)
    p.again(0)


def not_started(p: Pass, why: str) -> None:
    """The deploy deadline passed before the driver ran: a failure the restart policy counts."""
    limit = f"spec.rollback.readinessTimeoutSeconds={p.spec.rollback.readiness_timeout_seconds}s"
    count_failure(p, p.st.driver_pod or "driver", f"{why} (deadline {limit})", reason="DriverNotStarted")


STEPS = Steps(
    after_stopping=stopped,
    started=rollout.started,
    exited_while_starting=exited_while_starting,
    not_started=not_started,
)
