"""The leader Lease's rules, pure: when a standby may take the Lease and until when a leader may act.

Called by ``streamjob_operator.k8s.lease`` (which reads the clock and talks to
the API server) and by the unit tests with made-up times. Every time here is
this replica's own monotonic clock, in seconds: the Lease's ``renewTime`` is
another machine's wall clock and is never compared with ours, so clock skew
between nodes decides nothing (the rules of client-go's leaderelection):

- a standby measures a holder's lease from the moment *it* first saw the
  record as it is now (the Lease's resourceVersion changes on every renewal),
  and may take it once the record has not changed for the holder's
  ``leaseDurationSeconds``; the take is a write conditioned on that
  resourceVersion, so a renewal it did not see makes the take fail (409);
- a leader may act until ``renew_deadline`` after it *sent* its last renewal
  that the API server accepted. The standby saw that renewal no earlier than
  it was sent, so it cannot take the Lease before ``lease_seconds`` after the
  send: the leader stops ``lease_seconds - renew_deadline`` before that.
"""

from __future__ import annotations

from dataclasses import dataclass


class TimingError(ValueError):
    """Lease timings that cannot keep one leader (the message names the flag)."""


@dataclass(frozen=True)
class Timings:
    """The three durations of client-go's leader election (its defaults: 15 s, 10 s, 2 s)."""

    lease_seconds: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @classmethod
    def derive(cls, lease_seconds: float, renew_deadline: float | None = None, retry_period: float | None = None) -> Timings:
        """The client-go ratios (10/15 and 2/15 of the lease) for what is not given; raises TimingError."""
        timings = cls(float(lease_seconds),
                      float(renew_deadline) if renew_deadline is not None else lease_seconds * 2 / 3,
                      float(retry_period) if retry_period is not None else lease_seconds * 2 / 15)
        timings.check()
        return timings

    def write_timeout(self) -> float:
        """How long one status write may take: the margin between the leader stopping (a renewal older than
        renew_deadline) and a standby taking over (lease_seconds), so a write never lands after a handover."""
        return self.lease_seconds - self.renew_deadline

    def check(self) -> None:
        if not self.lease_seconds >= 1:
            raise TimingError(f"--lease-seconds: must be at least 1 (got {self.lease_seconds:g})")
        if not 0 < self.renew_deadline < self.lease_seconds:
            raise TimingError(f"--renew-deadline-seconds: must be above 0 and below --lease-seconds={self.lease_seconds:g} "
                              f"(got {self.renew_deadline:g}); the difference is the margin between the leader stopping "
                              "and a standby taking over")
        if not 0 < self.retry_period <= self.renew_deadline / 2:
            raise TimingError(f"--retry-period-seconds: must be above 0 and at most half of --renew-deadline-seconds="
                              f"{self.renew_deadline:g} (got {self.retry_period:g}), so a leader gets two tries to renew")

    @property
    def call_timeout(self) -> float:
        """Every Lease call gives up after this long: well inside the renew deadline, so a hung call leaves time to retry."""
        return self.renew_deadline / 2

    @property
    def margin(self) -> float:
        """How long before a standby could take the Lease the leader has stopped acting."""
        return self.lease_seconds - self.renew_deadline


@dataclass(frozen=True)
class Record:
    """What the Lease object says (holder None or "": released)."""

    version: str
    holder: str | None
    lease_seconds: float | None


@dataclass(frozen=True)
class Seen:
    """A record and the local monotonic time this replica first saw it in that version."""

    record: Record
    since: float


def observe(previous: Seen | None, record: Record, now: float) -> Seen:
    """The record as seen now: unchanged (same resourceVersion) keeps the time it was first seen."""
    if previous is not None and previous.record.version == record.version:
        return previous
    return Seen(record, now)


def free_at(seen: Seen, default_lease_seconds: float) -> float:
    """The local monotonic time from which another replica may take the Lease, if it is still unchanged then."""
    if not seen.record.holder:
        return seen.since
    return seen.since + (seen.record.lease_seconds or default_lease_seconds)


def may_take(seen: Seen, identity: str, now: float, default_lease_seconds: float) -> bool:
    """True when ``identity`` may write itself into the Lease (conditioned on ``seen.record.version``)."""
    return seen.record.holder == identity or now >= free_at(seen, default_lease_seconds)


def leading_until(renewal_sent: float, timings: Timings) -> float:
    """The local monotonic time after which a leader whose last accepted renewal was sent at ``renewal_sent`` must not act."""
    return renewal_sent + timings.renew_deadline
