"""The commands that read: ``list``, ``status``, ``history``, ``logs`` and ``inspect``.

Registered on the plugin's group by ``streamjob_cli.main``. They change nothing:
they read StreamJobs, their events and the driver's log through the API server,
and savepoints in S3 (``inspect``, ``history --sizes``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from . import present
from .kube import CliError, Kube, job_ref
from .options import connection_options, console, emit, lazy_connection_options, output_option, print_table, utc_now


class SavepointRefused(Exception):
    """``inspect``: the runtime's validator refused the savepoint."""


@click.command("list")
@connection_options
@click.option("-A", "--all-namespaces", is_flag=True, help="List the StreamJobs of every namespace.")
@output_option
def list_jobs(kube: Kube, all_namespaces: bool, output: str) -> None:
    """StreamJobs with their state, readiness, batch, watermark lag and last savepoint."""
    jobs = kube.list_jobs(all_namespaces)
    now = utc_now()
    if output != "table":
        emit([present.summary(j, now) for j in jobs], output)
        return
    where = "any namespace" if all_namespaces else f'namespace "{kube.namespace}"'
    print_table(present.list_table(jobs, now, all_namespaces=all_namespaces), f"No StreamJobs found in {where}.")


@click.command()
@connection_options
@click.argument("name")
@click.option("--events", "limit", type=click.IntRange(0), default=15, show_default=True, help="How many recent events to show.")
@output_option
def status(kube: Kube, name: str, limit: int, output: str) -> None:
    """A job's state, conditions and its recent events as a story."""
    job = kube.get(name)
    events = kube.events(name, job["metadata"].get("uid"))
    now = utc_now()
    if output != "table":
        document = present.status_document(job, events, now)
        document["events"] = document["events"][-limit:] if limit else []
        emit(document, output)
        return
    con = console()
    width = max(len(label) for label, _ in present.status_facts(job, now))
    for label, value in present.status_facts(job, now):
        con.print(f"[bold]{label + ':':<{width + 1}}[/bold] {value}", markup=True, highlight=False)
    con.print()
    con.print("[bold]Conditions[/bold]")
    print_table(present.conditions_table(job, now), "  (none yet)")
    con.print()
    con.print("[bold]Events[/bold] (oldest first)")
    print_table(present.story_table(present.story(events, now, limit) if limit else []), "  (no recent events)")


@click.command()
@connection_options
@click.argument("name")
@click.option("--sizes", is_flag=True, help="Read each savepoint's size from its manifest in S3 (read-only; the job's spec.s3 "
              "and credentials Secret, else AWS_* variables).")
@output_option
def history(kube: Kube, name: str, sizes: bool, output: str) -> None:
    """The savepoints recorded in the job's status, newest first."""
    job = kube.get(name)
    now = utc_now()
    found: dict[str, int | None] | None = None
    if sizes:
        from . import savepoints

        config = savepoints.s3_config(kube, name if (job.get("spec") or {}).get("s3") else None)
        paths = [e["path"] for e in present.history(job, now) if e.get("path")]
        found = savepoints.sizes(paths, config)
    rows = present.history(job, now, found)
    if output != "table":
        emit(rows, output)
        return
    print_table(present.history_table(rows), f"No savepoints recorded for {job_ref(name, kube.namespace)}.")


@click.command()
@connection_options
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming the log.")
@click.option("--tail", type=click.IntRange(0), help="Only the last N lines.")
def logs(kube: Kube, name: str, follow: bool, tail: int | None) -> None:
    """The log of the job's current driver pod (through the API server)."""
    job = kube.get(name)
    pod = (job.get("status") or {}).get("driverPod")
    if not pod:
        state = (job.get("status") or {}).get("state") or "unknown"
        raise CliError(f"{job_ref(name, kube.namespace)} has no driver pod (state {state})")
    out = sys.stdout.buffer
    for chunk in kube.driver_log(name, pod, follow=follow, tail=tail):
        out.write(chunk)
        out.flush()


@click.command()
@lazy_connection_options
@click.argument("savepoint_uri", metavar="SAVEPOINT")
@click.option("--job", "job_name", help="Read S3 settings and credentials from this job's spec.s3 and its Secret "
              "(default: AWS_* environment variables).")
@click.option("--no-checksums", is_flag=True, help="Check the files' presence and sizes only.")
@output_option
def inspect(connect: Callable[[], Kube], savepoint_uri: str, job_name: str | None, no_checksums: bool, output: str) -> None:
    """Read a savepoint's manifest from S3 (read-only) and validate it with the runtime's validator."""
    from streamjob_contract.savepoint_manifest import SavepointError

    from . import savepoints

    config = savepoints.s3_config(connect() if job_name else None, job_name)
    try:
        found = savepoints.inspect(savepoint_uri, config, verify_checksums=not no_checksums)
    except SavepointError as exc:
        if output != "table":
            emit({"uri": savepoint_uri, "valid": False, "error": str(exc), "kind": type(exc).__name__}, output)
        raise SavepointRefused(str(exc)) from None
    if output != "table":
        emit(found, output)
        return
    con = console()
    facts = [
        ("Savepoint", found["uri"]),
        ("Valid", "yes" + ("" if found["checksumsVerified"] else " (sizes only, checksums not verified)")),
        ("Job", f"{found['job']['namespace']}/{found['job']['name']} (spec hash {found['job']['hash'] or '-'})"),
        ("Batch", str(found["batchId"]) + (f" (planned {found['plannedBatchId']})" if found["plannedBatchId"] is not None else "")),
        ("State partitions", f"{found['statePartitions']} ({found['stateStoreProvider'] or 'unknown provider'})"),
        ("State operators", ", ".join(str(o) for o in found["stateOperators"]) or "none"),
        ("Watermark (ms)", str(found["watermarkMs"])),
        ("Spark", found["sparkVersion"]),
        ("Created", found["createdAt"]),
        ("Source checkpoint", found["sourceCheckpoint"]),
        ("Files", f"{found['files']} ({present.human_bytes(found['totalBytes'])})"),
    ]
    width = max(len(label) for label, _ in facts)
    for label, value in facts:
        con.print(f"[bold]{label + ':':<{width + 1}}[/bold] {value}", markup=True, highlight=False)
