"""A Kafka source that waits for offsets past its own deadline fails the query, as Spark should have.

Seen twice on the test bed under load (tests/runtime/test_runtime_kafka_broker_down.py, two
concurrent CI runs): after the broker stopped mid-run, the query neither progressed nor
failed for 400 s while Spark's Kafka admin client kept trying the broker. Where Spark does
fail, it does so within ``kafka.default.api.timeout.ms`` times its ``fetchOffset.numRetries``
tries. That the stuck thread was getting offsets is inferred from the admin client's
retries, not proven by a thread dump; the job would otherwise hang and no restart policy
would ever act. The Runner's main loop asks ``stalled()`` on every poll: once the
query has been getting a Kafka source's offsets for longer than that source's own
deadline plus a margin, it is stopped and the job fails with a message naming the
source's brokers and topic (job_runtime.query.pipeline.kafka_context), so the operator
restarts it by its restart policy.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from streamjob_contract.jobdef import JobDefinition, SourceKind, declared_sources

log = logging.getLogger("job_runtime.runner")

MARGIN_SECONDS = 60.0
# Spark's and Kafka's defaults for the options that bound one offsets fetch
DEFAULT_API_TIMEOUT_MS = 60000
DEFAULT_RETRIES = 3
DEFAULT_RETRY_INTERVAL_MS = 1000


def kafka_offsets_deadline(job: JobDefinition) -> float | None:
    """Seconds a Kafka source of this job may take to get offsets (its own timeouts and retries,
    plus MARGIN_SECONDS); None when the job reads no Kafka source."""
    deadlines = []
    for source in declared_sources(job):
        if source.kind != SourceKind.kafka:
            continue
        options = source.options
        try:
            api_timeout = int(options.get("kafka.default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)) / 1000
            retries = int(options.get("fetchOffset.numRetries", DEFAULT_RETRIES))
            interval = int(options.get("fetchOffset.retryIntervalMs", DEFAULT_RETRY_INTERVAL_MS)) / 1000
        except ValueError:  # Spark refuses such an option itself
            continue
        deadlines.append(api_timeout * (retries + 1) + interval * retries + MARGIN_SECONDS)
    return max(deadlines) if deadlines else None


class OffsetsWatch:
    """How long the query has been getting offsets from a Kafka source (Spark's status message)."""

    def __init__(self, deadline_seconds: float | None) -> None:
        self.deadline_seconds = deadline_seconds
        self._since: float | None = None

    def stalled(self, query: Any) -> str | None:
        """The failure to report once the wait passed the deadline, else None."""
        if self.deadline_seconds is None:
            return None
        try:
            message = str(query.status.get("message") or "")
        except Exception:  # the JVM may be going away: the next poll sees the query end
            return None
        if not (message.startswith("Getting offsets from") and "Kafka" in message):
            self._since = None
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
            return None
        waited = now - self._since
        if waited < self.deadline_seconds:
            return None
        log.error("kafka source stalled getting offsets seconds=%.0f deadline=%.0f status=%s", waited, self.deadline_seconds, message)
        return (f"kafka source stalled: no offsets after {waited:.0f}s (its timeouts and retries allow "
                f"{self.deadline_seconds:.0f}s); is the broker reachable?")
