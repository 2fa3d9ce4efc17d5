"""Storage hygiene, the pure rules (job_runtime.checkpoints.hygiene): which directories may be deleted, given what is there.

Tables over listings: run directories by number, owner and markers; savepoint
directories by manifest, markers, job and age. The runtime's reading of the
checkpoint layout is checked against the operator's own naming of it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from job_runtime.checkpoints import hygiene
from job_runtime.checkpoints.hygiene import RunDirFacts, RunLayout, SavepointDirFacts
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.decide import spec_json

UID = "3f0c2a9e-1111-2222-3333-444455556666"
OTHER_UID = "9d1e7b2c-aaaa-bbbb-cccc-ddddeeeeffff"
JOB = "team-a/orders"
NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=timezone.utc)


# ---- the layout: the runtime reads what the operator wrote -----------------------------------


@pytest.mark.parametrize("base", ["s3a://bucket/ck", "s3a://bucket/ck/", "s3a://bucket", "file:///data/ck"])
@pytest.mark.parametrize("epoch", [1, 7, 123])
def test_the_runtime_reads_the_operators_checkpoint_layout(base: str, epoch: int) -> None:
    location = names.checkpoint_location(base, "orders", UID, epoch)
    layout = hygiene.run_layout(location, name="orders", uid=UID)
    assert layout == RunLayout(owner_prefix=location.rsplit("/", 1)[0], run=epoch)
    assert layout.owner_prefix.endswith("/orders-3f0c2a9e")


@pytest.mark.parametrize(
    ("checkpoint", "name", "uid", "why"),
    [
        ("s3a://b/ck/orders-3f0c2a9e/run-3", "orders", None, "no uid: ownership cannot be proved"),
        ("s3a://b/ck/orders-3f0c2a9e/run-3", "orders", OTHER_UID, "another job's prefix"),
        ("s3a://b/ck/orders-3f0c2a9e/run-3", "order", UID, "a name that is a prefix of the directory's"),
        ("s3a://b/ck/orders-3f0c2a9e-x/run-3", "orders", UID, "not exactly <name>-<uid8>"),
        ("s3a://b/ck/orders-3f0c2a9e/run-03", "orders", UID, "not a run number as the operator writes it"),
        ("s3a://b/ck/orders-3f0c2a9e/run-3/x", "orders", UID, "below a run directory"),
        ("s3a://b/ck/checkpoint", "orders", UID, "a checkpoint given by hand"),
        ("s3a://b/run-3", "orders", UID, "no owner directory at all"),
    ],
)
def test_no_layout_means_no_run_directory_is_ever_pruned(checkpoint: str, name: str, uid: str | None, why: str) -> None:
    assert hygiene.run_layout(checkpoint, name=name, uid=uid) is None, why


# ---- run directories ------------------------------------------------------------------------


def test_only_run_directories_older_than_the_current_one_are_even_looked_at() -> None:
    listing = ["run-10", "run-2", "run-9", "run-1", "notes", "run-x", "run-01", "run-11", "_tmp"]
    assert hygiene.older_run_dirs(listing, current=10) == ["run-1", "run-2", "run-9"]
    assert hygiene.older_run_dirs(listing, current=1) == []


@pytest.mark.parametrize(
    ("facts", "prune", "reason"),
    [
        (RunDirFacts("run-4", owner_uid=UID), True, "superseded by run-5"),
        (RunDirFacts("run-0", owner_uid=UID), True, "superseded by run-5"),
        (RunDirFacts("run-5", owner_uid=UID), False, "not older than the current run-5"),  # the live driver's own
        (RunDirFacts("run-6", owner_uid=UID), False, "not older"),  # newer: never
        (RunDirFacts("run-4", owner_uid=OTHER_UID), False, "owned by another job"),
        (RunDirFacts("run-4"), False, "no owner marker"),
        (RunDirFacts("run-4", owner_unreadable=True), False, "unreadable"),
        # a prune that was cut short: the owner marker may be gone already, the pruning marker says whose it is
        (RunDirFacts("run-4", pruning_uid=UID), True, "interrupted prune"),
        (RunDirFacts("run-4", owner_uid=UID, pruning_uid=UID), True, "interrupted prune"),
        (RunDirFacts("run-4", pruning_uid=OTHER_UID), False, "names another job"),
        (RunDirFacts("run-4", owner_uid=UID, pruning_uid=""), False, "names another job"),  # unreadable marker
        (RunDirFacts("notes", owner_uid=UID), False, "not a run-<n> directory"),
    ],
)
def test_which_run_directories_go(facts: RunDirFacts, prune: bool, reason: str) -> None:
    verdict = hygiene.judge_run_dir(facts, current=5, uid=UID)
    assert (verdict.prune, verdict.name) == (prune, facts.name)
    assert reason in verdict.reason


def test_the_pruning_marker_names_the_job_and_what_superseded_the_directory() -> None:
    data = hygiene.pruning_marker(job=JOB, uid=UID, superseded_by="s3a://b/ck/orders-3f0c2a9e/run-5", now=NOW)
    assert hygiene.parse_pruning_marker(data) == UID
    assert b"run-5" in data and b"2026-01-02T12:00:00Z" in data
    assert hygiene.parse_pruning_marker(b"{not json") == ""


# ---- savepoint directories ---------------------------------------------------------------------


def _ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("facts", "writing", "prune", "reason"),
    [
        # abandoned: our marker, no manifest, nothing written for longer than the timeout
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=_ago(3600), newest_write=_ago(700)), False, True,
         "abandoned savepoint"),
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=None, newest_write=_ago(601)), False, True,
         "abandoned"),
        # in progress: the marker or the newest file is within the timeout
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=_ago(3600), newest_write=_ago(30)), False, False,
         "in progress"),
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=_ago(30), newest_write=_ago(3600)), False, False,
         "in progress"),
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=_ago(600), newest_write=_ago(600)), False, False,
         "in progress"),  # exactly the timeout: not yet
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=NOW + timedelta(seconds=5)), False, False,
         "in progress"),  # a writer whose clock is ahead
        # this driver is writing it, however old
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=_ago(3600), newest_write=_ago(3600)), True, False,
         "writing it"),
        # complete savepoints are retention's, whatever else is there
        (SavepointDirFacts("a", has_manifest=True), False, False, "complete savepoint"),
        (SavepointDirFacts("a", has_manifest=True, in_progress_job=JOB, in_progress_started=_ago(9999)), False, False,
         "complete savepoint"),  # killed between the manifest and removing the marker
        # not ours
        (SavepointDirFacts("a", newest_write=_ago(9999)), False, False, "no savepoint marker"),
        (SavepointDirFacts("a", in_progress_job="team-a/other", in_progress_started=_ago(9999), newest_write=_ago(9999)),
         False, False, "another job (team-a/other)"),
        (SavepointDirFacts("a", in_progress_job="", in_progress_started=None, newest_write=_ago(9999)), False, False,
         "another job"),  # unreadable marker
        (SavepointDirFacts("a", in_progress_job=JOB, in_progress_started=_ago(9999), newest_write=_ago(9999),
                           nested="x/_savepoint.json"), False, False, "holds another savepoint"),
        (SavepointDirFacts("a", in_progress_job=JOB), False, False, "no time"),
        # an interrupted delete (deleting marker, manifest gone) of this job's is finished
        (SavepointDirFacts("a", deleting_job=JOB, newest_write=_ago(700)), False, True, "interrupted savepoint delete"),
        (SavepointDirFacts("a", deleting_job=JOB, newest_write=_ago(10)), False, False, "in progress"),
        (SavepointDirFacts("a", deleting_job="team-b/orders", newest_write=_ago(9999)), False, False, "another job"),
    ],
)
def test_which_savepoint_directories_go(facts: SavepointDirFacts, writing: bool, prune: bool, reason: str) -> None:
    verdict = hygiene.judge_savepoint_dir(facts, job=JOB, timeout_seconds=600, now=NOW, writing=writing)
    assert verdict.prune is prune, verdict
    assert reason in verdict.reason


def test_savepoint_markers_are_read_as_the_writer_and_the_delete_write_them() -> None:
    job, started = hygiene.parse_in_progress_marker(b'{"job": "team-a/orders", "started_at": "2026-01-02T11:00:00.5+00:00"}')
    assert (job, started) == (JOB, datetime(2026, 1, 2, 11, 0, 0, 500000, tzinfo=timezone.utc))
    assert hygiene.parse_in_progress_marker(b'{"job": "team-a/orders", "started_at": "yesterday"}') == (JOB, None)
    assert hygiene.parse_in_progress_marker(b"[]") == ("", None)
    assert hygiene.parse_deleting_marker(b'{"job": {"namespace": "team-a", "name": "orders", "hash": "x"}}') == JOB
    assert hygiene.parse_deleting_marker(b"{}") == ""


def test_the_same_place_whatever_the_s3_spelling() -> None:
    assert hygiene.same_place("s3://b/sp/x", "s3a://b/sp/x/")
    assert not hygiene.same_place("s3://b/sp/x", "s3://b/sp/xy")
    assert not hygiene.same_place("s3://b/sp/x", "not a location")


# ---- the operator shows what the driver pruned ----------------------------------------------------


def test_the_drivers_storage_report_reaches_status_job_storage() -> None:
    from datetime import datetime as dt

    from streamjob_operator.api.spec import parse_spec
    from streamjob_contract.lifecycle import LifecycleState
    from streamjob_operator.api.status import StreamJobStatus
    from streamjob_operator.reconcile.decide import decide
    from streamjob_operator.reconcile.model import DriverPod, Observations, PodPhase
    from streamjob_contract.runtime_status import RunState, RuntimeStatus
    from streamjob_operator.reconcile.observe import job_progress

    body = {"state": "RUNNING", "lastBatchId": 5, "latestCompletedBatch": 5,
            "storage": {"passes": 2, "prunedRunDirs": 1, "prunedSavepointDirs": 3, "lastPassAt": "2026-01-02T12:00:00Z",
                        "lastError": "savepoint directories: ClientError: " + "x" * 5000}}
    progress = job_progress(body)
    report = progress.runtime.storage if progress.runtime is not None else None
    assert report is not None and (report.pruned_run_dirs, report.pruned_savepoint_dirs) == (1, 3)
    assert job_progress({"state": "RUNNING"}).runtime == RuntimeStatus(state=RunState.RUNNING)  # an older runtime has no report
    garbled = job_progress({"state": "RUNNING", "storage": {"passes": "2", "prunedRunDirs": -1, "prunedSavepointDirs": True}})
    assert garbled == job_progress({"state": "RUNNING", "storage": {}})  # what is not a count counts 0

    spec = parse_spec({"image": "i", "job": {"entrypoint": "m:f"}, "checkpoint": {"location": "s3a://b/ck"}})
    text = spec_json(spec)
    status = StreamJobStatus().model_copy(update=dict(
        state=LifecycleState.running, ready=True, driver_pod="orders-driver-2", driver_epoch=2,
        checkpoint_location=f"s3a://b/ck/orders-{UID[:8]}/run-2", last_reconciled_spec=text, last_stable_spec=text,
        deployed_at="2026-01-02T11:00:00Z"))
    observed = Observations(name="orders", namespace="team-a", uid=UID, drivers=(DriverPod("orders-driver-2", PodPhase.running),),
                            job=progress)
    job = decide(spec, status, observed, dt(2026, 1, 2, 12, 0, 5, tzinfo=timezone.utc)).status.job
    assert job is not None and job.storage is not None
    dumped = job.storage.model_dump(by_alias=True)
    assert {k: dumped[k] for k in ("passes", "prunedRunDirs", "prunedSavepointDirs", "lastPassAt")} == {
        "passes": 2, "prunedRunDirs": 1, "prunedSavepointDirs": 3, "lastPassAt": "2026-01-02T12:00:00Z"}
    assert len(dumped["lastError"]) <= 1024 and dumped["lastError"].startswith("savepoint directories: ClientError")


# ---- what the pruning relies on: the operator never goes back to an older run directory ---------------


@pytest.mark.parametrize("kind", ["rollback", "restart", "upgrade", "resume", "deploy"])
@pytest.mark.parametrize("mode", ["savepoint", "last-state", "stateless"])
def test_the_next_driver_never_gets_an_older_run_directory(kind: str, mode: str) -> None:
    """Whatever the operation and restore mode, the next driver's checkpoint is the current one or a new, higher
    run-<epoch>: so a driver that has committed in run-N never leaves anyone in need of run-M, M < N."""
    from streamjob_operator.api.spec import parse_spec
    from streamjob_contract.lifecycle import LifecycleState
    from streamjob_operator.api.status import Operation, StreamJobStatus
    from streamjob_operator.reconcile.decide import decide
    from streamjob_operator.reconcile.model import CreateDriver, Observations

    base = "s3a://b/ck"
    spec = parse_spec({"image": "i", "job": {"entrypoint": "m:f"}, "checkpoint": {"location": base},
                       "savepoint": {"location": "s3://b/sp"}})
    text = spec_json(spec)
    current = names.checkpoint_location(base, "orders", UID, 4)  # run-4, while the epoch is already 6
    status = StreamJobStatus().model_copy(update=dict(
        state=LifecycleState.upgrading, driver_pod="orders-driver-6", driver_epoch=6, checkpoint_location=current,
        restored_from="s3://b/sp/orders-x-upgrade", last_reconciled_spec=text, last_stable_spec=text,
        operation=Operation(kind=kind, phase="Stopping", restore_mode=mode, target_spec_hash="h",
                            savepoint_path="s3://b/sp/orders-x-upgrade" if mode == "savepoint" else None),
    ))
    decision = decide(spec, status, Observations(name="orders", namespace="team-a", uid=UID),
                      datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc))
    created = [a for a in decision.actions if isinstance(a, CreateDriver)]
    assert len(created) == 1, decision
    layout = hygiene.run_layout(created[0].checkpoint_location, name="orders", uid=UID)
    assert layout is not None and layout.owner_prefix == current.rsplit("/", 1)[0]
    if mode == "last-state":
        assert created[0].checkpoint_location == current
    else:
        assert layout.run == 7, created[0]


# ---- the runtime's options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [("--savepoint-timeout-seconds", "0", "savepoint_timeout_seconds"), ("--savepoint-timeout-seconds", "nan", "savepoint_timeout_seconds"),
     ("--hygiene-interval-seconds", "-5", "hygiene_interval_seconds")],
)
def test_bad_hygiene_options_are_refused_naming_the_option(option: str, value: str, field: str) -> None:
    from job_runtime.main import build_parser, settings_from_args
    from job_runtime.settings import SettingsError

    args = build_parser().parse_args(["run", "--job", "j.json", "--name", "n", "--namespace", "ns", "--checkpoint",
                                      "s3a://b/ck", "--state-partitions", "2", "--token-file", "t", option, value])
    with pytest.raises(SettingsError, match=f"^{option}: must be > 0"):
        settings_from_args(args, "hash")
    good = build_parser().parse_args(["run", "--job", "j.json", "--name", "n", "--namespace", "ns", "--checkpoint",
                                      "s3a://b/ck", "--state-partitions", "2", "--token-file", "t", option, "30"])
    assert getattr(settings_from_args(good, "hash"), field) == 30.0
