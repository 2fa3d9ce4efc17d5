"""The leader Lease's rules on made-up clocks: when a standby may take over, until when a leader may act.

The rules are pure (streamjob_operator.k8s.lease_rules); the fence and the
deadline watchdog of LeaderElector run here on an injected clock, with no API
server (the calls to it are covered on the test bed: tests/e2e/test_leader_lease.py).
"""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from streamjob_operator.k8s.lease import LeaderElector, NotLeading
from streamjob_operator.k8s.lease_rules import Record, Seen, TimingError, Timings, free_at, leading_until, may_take, observe

ME, OTHER = "replica-b", "replica-a"


def test_timings_default_to_client_go_and_keep_a_margin() -> None:
    t = Timings.derive(15)
    assert (t.lease_seconds, t.renew_deadline, t.retry_period) == (15, 10, 2)
    assert t.call_timeout == 5 and t.call_timeout < t.renew_deadline
    assert t.margin == 5
    short = Timings.derive(6)
    assert (short.renew_deadline, short.retry_period, short.call_timeout) == (4, 0.8, 2)


@pytest.mark.parametrize("lease, renew, retry, flag", [
    pytest.param(0, None, None, "--lease-seconds", id="no lease"),
    pytest.param(10, 10, None, "--renew-deadline-seconds", id="renew deadline equal to the lease: no margin"),
    pytest.param(10, 12, None, "--renew-deadline-seconds", id="renew deadline beyond the lease"),
    pytest.param(10, 6, 4, "--retry-period-seconds", id="one retry only before the deadline"),
    pytest.param(10, 6, 0, "--retry-period-seconds", id="no retry period"),
])
def test_timings_that_cannot_keep_one_leader_are_refused_naming_the_flag(lease: float, renew: float | None,
                                                                         retry: float | None, flag: str) -> None:
    with pytest.raises(TimingError, match=flag):
        Timings.derive(lease, renew, retry)


def seen_at(holder: str | None, version: str, since: float, lease_seconds: float | None = 15) -> Seen:
    return Seen(Record(version, holder, lease_seconds), since)


@pytest.mark.parametrize("seen, now, may", [
    pytest.param(seen_at(OTHER, "7", 100.0), 114.9, False, id="the holder's record unchanged for less than its lease"),
    pytest.param(seen_at(OTHER, "7", 100.0), 115.0, True, id="the holder's record unchanged for its whole lease"),
    pytest.param(seen_at(OTHER, "7", 100.0, lease_seconds=40), 115.0, False, id="the holder's own lease duration counts, not ours"),
    pytest.param(seen_at(OTHER, "7", 100.0, lease_seconds=None), 115.0, True, id="no duration in the record: ours"),
    pytest.param(seen_at(None, "8", 100.0), 100.0, True, id="released (no holder): at once"),
    pytest.param(seen_at("", "8", 100.0), 100.0, True, id="released (empty holder): at once"),
    pytest.param(seen_at(ME, "9", 100.0), 100.1, True, id="the holder renews its own lease"),
])
def test_when_a_replica_may_write_itself_into_the_lease(seen: Seen, now: float, may: bool) -> None:
    assert may_take(seen, ME, now, 15) is may


def test_a_change_of_the_record_restarts_the_count_and_an_unchanged_one_does_not() -> None:
    first = observe(None, Record("7", OTHER, 15), now=100.0)
    same = observe(first, Record("7", OTHER, 15), now=110.0)
    assert same is first and free_at(same, 15) == 115.0
    renewed = observe(same, Record("8", OTHER, 15), now=112.0)  # a renewal: only the resourceVersion changed
    assert renewed.since == 112.0 and not may_take(renewed, ME, 115.0, 15) and may_take(renewed, ME, 127.0, 15)


def test_a_replica_that_starts_late_waits_a_whole_lease_however_old_the_record_is() -> None:
    # a holder dead for an hour: the new replica cannot know that from a timestamp on another machine's clock
    seen = observe(None, Record("7", OTHER, 15), now=5.0)
    assert not may_take(seen, ME, 19.9, 15) and may_take(seen, ME, 20.0, 15)


@pytest.mark.parametrize("origin", [0.0, 1e6, -3600.0, 7 * 86400.0])
def test_skew_between_replicas_decides_nothing(origin: float) -> None:
    """Each replica's monotonic clock has its own origin (and the holder's renewTime is not even in the record):
    the same events at the same real moments give the same decisions on every replica."""
    events = [(0.0, "1"), (2.0, "2"), (4.0, "3")]  # renewals seen at real seconds 0, 2, 4; then the holder stops
    seen = None
    for real, version in events:
        seen = observe(seen, Record(version, OTHER, 6), now=origin + real)
    assert seen is not None
    decisions = [may_take(seen, ME, origin + real, 15) for real in (5.0, 9.9, 10.0, 30.0)]
    assert decisions == [False, False, True, True]


@pytest.mark.parametrize("timings", [Timings.derive(15), Timings.derive(6), Timings.derive(30, 12, 3), Timings(2, 1, 0.5)])
@pytest.mark.parametrize("delay", [0.0, 0.001, 1.0, 9.0])
def test_the_leader_stops_a_margin_before_anyone_may_take_over(timings: Timings, delay: float) -> None:
    """The renewal was sent at ``sent``; a standby saw it ``delay`` later (in flight, then its poll). The standby's
    first chance is at least ``margin`` after the leader's last moment to act, whatever the delay."""
    sent = 1000.0
    seen = Seen(Record("42", OTHER, timings.lease_seconds), since=sent + delay)
    assert free_at(seen, timings.lease_seconds) - leading_until(sent, timings) >= timings.margin > 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def elector(clock: FakeClock | None = None, lost: list[str] | None = None, timings: Timings | None = None) -> LeaderElector:
    record = lost if lost is not None else []
    return LeaderElector(client.ApiClient(), "ops", "streamjob-operator", ME, timings or Timings.derive(15),
                         clock=clock or time.monotonic, on_lost=record.append)


def test_the_fence_lets_a_leader_write_until_its_deadline_then_steps_down_instead() -> None:
    clock, lost = FakeClock(), []
    e = elector(clock, lost)
    with pytest.raises(NotLeading):
        e.ensure_leading()  # a standby never writes
    assert lost == []
    e._renewed(sent=clock.now)
    clock.now += 9.99
    e.ensure_leading()
    assert e.leading()
    clock.now += 0.01  # the renew deadline (10 s after the renewal was sent), e.g. a process thawed after SIGSTOP
    assert not e.leading()
    with pytest.raises(NotLeading):
        e.ensure_leading()
    assert len(lost) == 1 and "renew deadline" in lost[0]
    with pytest.raises(NotLeading):
        e.ensure_leading()
    assert len(lost) == 1, "stepped down twice"
    e._renewed(sent=clock.now)  # a renewal that returns after stepping down does not make it a leader again
    assert not e.leading()


def test_a_renewal_sent_after_the_deadline_steps_down_instead_of_extending_it() -> None:
    """A leader frozen past its renew deadline whose election thread wakes first and renews (nobody took over yet):
    it was not entitled to act in between, so it steps down rather than carry on."""
    clock, lost = FakeClock(), []
    e = elector(clock, lost)
    e._renewed(sent=clock.now)
    clock.now += 9.0
    e._renewed(sent=clock.now)  # in time: the deadline moves to 10 s after this send
    clock.now += 10.0
    e._renewed(sent=clock.now)  # sent exactly at the deadline: too late
    assert not e.leading() and len(lost) == 1 and "before this renewal was sent" in lost[0]
    with pytest.raises(NotLeading):
        e.ensure_leading()


def test_a_released_leader_refuses_writes_without_stepping_down() -> None:
    clock, lost = FakeClock(), []
    e = elector(clock, lost)
    e._renewed(sent=clock.now)
    e.release(idle=lambda: False)  # passes still running: the Lease is left to expire, no API call
    with pytest.raises(NotLeading):
        e.ensure_leading()
    assert lost == [] and not e.leading()


def test_the_watchdog_steps_down_at_the_deadline_while_a_renewal_hangs() -> None:
    """Nothing returns from the API server here: the deadline alone ends the leadership, and not before it."""
    lost: list[str] = []
    stepped = threading.Event()
    timings = Timings(2, 1, 0.5)
    e = LeaderElector(client.ApiClient(), "ops", "streamjob-operator", ME, timings,
                      on_lost=lambda why: (lost.append(why), stepped.set()))
    sent = time.monotonic()
    e._renewed(sent)
    threading.Thread(target=e._watch_deadline, daemon=True).start()
    assert stepped.wait(10), "the watchdog did not step down"
    assert time.monotonic() >= leading_until(sent, timings)
    assert "--renew-deadline-seconds=1" in lost[0] and not e.leading()
