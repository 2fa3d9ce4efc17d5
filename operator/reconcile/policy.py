"""Restart policies, durations and RFC 3339 times: small pure helpers of the decision.

Pure. Called by ``reconcile.decide``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from streamjob_operator.api.spec import RestartPolicy, RestartPolicyType

JOB_POLL_SECONDS = 10.0  # steady-state poll of a driver's /status; faster while an operation or readiness is pending

_GO_DURATION = re.compile(r"([0-9]+)(s|m|h|d)")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``1h30m`` -> 90 minutes (the CRD pattern guarantees the shape)."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 90s, 15m, 1h30m, 7d)")
    return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[u] for n, u in parts))


def fmt_time(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def restart_delay(
    policy: RestartPolicy, restart_count: int, failure_times: Sequence[datetime], now: datetime
) -> float | None:
    """Seconds to wait before restarting after a failure, or None when the policy is exhausted.

    ``restart_count`` counts the restarts already done since the last successful start;
    ``failure_times`` includes the failure being decided on.
    """
    if policy.type is RestartPolicyType.never:
        return None
    if policy.type is RestartPolicyType.failure_rate:
        window = timedelta(seconds=policy.failure_rate_interval_seconds)
        recent = [t for t in failure_times if now - t <= window]
        return None if len(recent) > policy.max_failures else float(policy.delay_seconds)
    if restart_count >= policy.max_restarts:
        return None
    if policy.type is RestartPolicyType.fixed_delay:
        return float(policy.delay_seconds)
    delay = policy.delay_seconds * policy.backoff_multiplier**restart_count
    return float(min(delay, policy.max_delay_seconds))


def describe_policy(policy: RestartPolicy) -> str:
    if policy.type is RestartPolicyType.never:
        return "restartPolicy Never"
    if policy.type is RestartPolicyType.failure_rate:
        return f"restartPolicy FailureRate allows {policy.max_failures} failures in {policy.failure_rate_interval_seconds}s"
    return f"restartPolicy {policy.type.value} allows {policy.max_restarts} restarts"
