"""``kubectl streamjob``: the kubectl plugin for StreamJobs (the ``kubectl-streamjob`` console script).

Commands read StreamJobs and their events, and change only what the operator
already understands: ``spec.savepointNonce``, ``spec.restartNonce`` and
``spec.state``. The plugin never calls the driver; it reads S3 (``inspect``,
``history --sizes``) and never writes there.

Exit codes: 0 done; 1 error (job not found, API or S3 failure, no driver pod);
2 bad usage; 3 a ``--wait`` that ended in failure or timed out; 4 ``inspect``
refused the savepoint (the message names the file and the rule).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table as RichTable

from . import present, waits
from .kube import CliError, Kube, job_ref

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_WAIT_FAILED = 3
EXIT_SAVEPOINT_INVALID = 4

POLL_SECONDS = 1.0
DEFAULT_WAIT_SECONDS = 600
CONFLICT_RETRIES = 5

F = TypeVar("F", bound=Callable[..., Any])


class WaitFailed(Exception):
    """A ``--wait`` saw the change fail or did not see it finish in time."""


class SavepointRefused(Exception):
    """``inspect``: the runtime's validator refused the savepoint."""


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # piped output is for scripts and `grep`: never wrapped to 80 columns
    return Console(file=stream, width=None if stream.isatty() else 1000, highlight=False, soft_wrap=not stream.isatty())


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ---- options shared by every command ---------------------------------------------------


def _connection_params(f: F) -> F:
    f = click.option("-n", "--namespace", help="The namespace (default: the context's namespace, else default).")(f)
    f = click.option("--context", help="The kubeconfig context to use (default: the current context).")(f)
    return click.option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).")(f)


def _connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
    root = click.get_current_context().find_root().params
    return Kube.connect(kubeconfig or root.get("kubeconfig"), context or root.get("context"), namespace or root.get("namespace"))


def connection_options(f: F) -> F:
    """--kubeconfig, --context, -n: accepted before or after the command, like kubectl's; passes ``kube``."""

    @_connection_params
    @functools.wraps(f)
    def wrapper(*args: Any, kubeconfig: str | None, context: str | None, namespace: str | None, **kwargs: Any) -> Any:
        return f(*args, kube=_connect(kubeconfig, context, namespace), **kwargs)

    return wrapper  # type: ignore[return-value]


def lazy_connection_options(f: F) -> F:
    """The same options, but passes ``connect``: a command that may not need the cluster connects only when it does."""

    @_connection_params
    @functools.wraps(f)
    def wrapper(*args: Any, kubeconfig: str | None, context: str | None, namespace: str | None, **kwargs: Any) -> Any:
        return f(*args, connect=lambda: _connect(kubeconfig, context, namespace), **kwargs)

    return wrapper  # type: ignore[return-value]


def output_option(f: F) -> F:
    return click.option(
        "-o", "--output", type=click.Choice(present.FORMATS), default="table", show_default=True,
        help="table for people; json or yaml for scripts.",
    )(f)


def wait_options(f: F) -> F:
    f = click.option("--timeout", type=click.IntRange(1), help="Seconds --wait waits before giving up (exit 3).")(f)
    return click.option("--wait", is_flag=True, help="Wait until the operator has done it, showing progress.")(f)


def _print_table(table: present.Table, empty: str) -> None:
    if not table.rows:
        _console(stderr=True).print(empty)
        return
    out = RichTable(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in table.columns:
        out.add_column(column, no_wrap=column not in ("MESSAGE",), overflow="fold")
    for row in table.rows:
        out.add_row(*row)
    con = _console()
    if con.is_terminal:
        con.print(out)
        return
    with con.capture() as captured:  # piped: no padding after the last column
        con.print(out)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def _emit(value: Any, fmt: str) -> None:
    click.echo(present.dump(value, fmt))


# ---- the group ---------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).")
@click.option("--context", help="The kubeconfig context to use.")
@click.option("-n", "--namespace", help="The namespace (default: the context's namespace, else default).")
def cli(kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
    """Operate StreamJobs: list them, read their status and history, take savepoints,
    suspend, resume and restart them, read the driver's log and inspect savepoints.

    Exit codes: 0 done, 1 error, 2 bad usage, 3 a --wait that failed or timed out,
    4 inspect refused the savepoint.
    """


@cli.command("list")
@connection_options
@click.option("-A", "--all-namespaces", is_flag=True, help="List the StreamJobs of every namespace.")
@output_option
def list_jobs(kube: Kube, all_namespaces: bool, output: str) -> None:
    """StreamJobs with their state, readiness, batch, watermark lag and last savepoint."""
    jobs = kube.list_jobs(all_namespaces)
    now = _now()
    if output != "table":
        _emit([present.summary(j, now) for j in jobs], output)
        return
    where = "any namespace" if all_namespaces else f'namespace "{kube.namespace}"'
    _print_table(present.list_table(jobs, now, all_namespaces=all_namespaces), f"No StreamJobs found in {where}.")


@cli.command()
@connection_options
@click.argument("name")
@click.option("--events", "limit", type=click.IntRange(0), default=15, show_default=True, help="How many recent events to show.")
@output_option
def status(kube: Kube, name: str, limit: int, output: str) -> None:
    """A job's state, conditions and its recent events as a story."""
    job = kube.get(name)
    events = kube.events(name, job["metadata"].get("uid"))
    now = _now()
    if output != "table":
        document = present.status_document(job, events, now)
        document["events"] = document["events"][-limit:] if limit else []
        _emit(document, output)
        return
    con = _console()
    width = max(len(label) for label, _ in present.status_facts(job, now))
    for label, value in present.status_facts(job, now):
        con.print(f"[bold]{label + ':':<{width + 1}}[/bold] {value}", markup=True, highlight=False)
    con.print()
    con.print("[bold]Conditions[/bold]")
    _print_table(present.conditions_table(job, now), "  (none yet)")
    con.print()
    con.print("[bold]Events[/bold] (oldest first)")
    _print_table(present.story_table(present.story(events, now, limit) if limit else []), "  (no recent events)")


@cli.command()
@connection_options
@click.argument("name")
@click.option("--sizes", is_flag=True, help="Read each savepoint's size from its manifest in S3 (read-only; the job's spec.s3 "
              "and credentials Secret, else AWS_* variables).")
@output_option
def history(kube: Kube, name: str, sizes: bool, output: str) -> None:
    """The savepoints recorded in the job's status, newest first."""
    job = kube.get(name)
    now = _now()
    found: dict[str, int | None] | None = None
    if sizes:
        from . import savepoints

        config = savepoints.s3_config(kube, name if (job.get("spec") or {}).get("s3") else None)
        paths = [e["path"] for e in present.history(job, now) if e.get("path")]
        found = savepoints.sizes(paths, config)
    rows = present.history(job, now, found)
    if output != "table":
        _emit(rows, output)
        return
    _print_table(present.history_table(rows), f"No savepoints recorded for {job_ref(name, kube.namespace)}.")


# ---- imperative commands --------------------------------------------------------------


def _patch(kube: Kube, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reads the job, computes the spec change from it, patches it guarded by its resourceVersion;
    reads again and retries when someone else changed the job in between. Returns (before, after)."""
    for _ in range(CONFLICT_RETRIES):
        before = kube.get(name)
        spec = change(before)
        if spec is None:
            return before, before
        try:
            return before, kube.patch_spec(before, spec)
        except CliError as exc:
            if exc.status == 409:  # changed since read: read again
                continue
            raise
    raise CliError(f"{job_ref(name, kube.namespace)} kept changing while it was being patched; try again")


def _wait(kube: Kube, name: str, what: str, timeout: float, check: Callable[[dict[str, Any]], waits.Outcome]) -> str:
    """Polls the job until ``check`` says done; a spinner (or, when not a terminal, one line per
    change) shows the progress on stderr. Returns the outcome's message; raises WaitFailed."""
    err = _console(stderr=True)
    deadline = time.monotonic() + timeout
    shown = ""
    with err.status(f"Waiting for {what}", spinner="dots") as spinner:
        while True:
            job = kube.get(name)
            outcome = check(job)
            if outcome.done:
                if not outcome.ok:
                    raise WaitFailed(f"{what} failed for {job_ref(name, kube.namespace)}: {outcome.message}")
                return outcome.message
            line = waits.progress(job)
            if line != shown:
                shown = line
                spinner.update(f"Waiting for {what}: {line}")
                if not err.is_terminal:
                    err.print(f"waiting for {what}: {line}")
            if time.monotonic() >= deadline:
                raise WaitFailed(f"{what} did not finish within {int(timeout)}s for {job_ref(name, kube.namespace)} "
                                 f"(last seen: {line}); see `kubectl streamjob status {name} -n {kube.namespace}`")
            time.sleep(POLL_SECONDS)


@cli.command()
@connection_options
@click.argument("name")
@wait_options
def savepoint(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Take a savepoint now, the job keeps running (bumps spec.savepointNonce).

    With --wait, prints the savepoint's path once the operator records it."""
    ref = job_ref(name, kube.namespace)

    def bump(job: dict[str, Any]) -> dict[str, Any]:
        spec = job.get("spec") or {}
        if not (spec.get("savepoint") or {}).get("location"):
            raise CliError(f"{ref} has no spec.savepoint.location: the operator has nowhere to write a savepoint")
        return {"savepointNonce": int(spec.get("savepointNonce", 0)) + 1}

    before, after = _patch(kube, name, bump)
    nonce = int(after["spec"]["savepointNonce"])
    before_path = ((before.get("status") or {}).get("lastSavepoint") or {}).get("path")
    _console(stderr=True).print(f"streamjob.streamjob.io/{name} savepoint requested (savepointNonce={nonce})")
    if not wait:
        return
    limit = timeout or int((after["spec"].get("savepoint") or {}).get("timeoutSeconds", DEFAULT_WAIT_SECONDS)) + 120
    path = _wait(kube, name, "the savepoint", limit, lambda job: waits.savepoint(job, nonce, before_path))
    click.echo(path)


@cli.command()
@connection_options
@click.argument("name")
@wait_options
def suspend(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Stop the job with a savepoint and keep it stopped (spec.state: suspended)."""
    before, after = _patch(kube, name, lambda job: None if (job.get("spec") or {}).get("state") == "suspended"
                           else {"state": "suspended"})
    said = "already suspended" if before is after else "suspend requested"
    _console(stderr=True).print(f"streamjob.streamjob.io/{name} {said}")
    if wait:
        generation = int(after["metadata"]["generation"])
        blocked = (before.get("status") or {}).get("blockedChange")
        _wait(kube, name, "the suspension", timeout or DEFAULT_WAIT_SECONDS, lambda job: waits.suspended(job, generation, blocked))
        _console(stderr=True).print(f"streamjob.streamjob.io/{name} suspended")


@cli.command()
@connection_options
@click.argument("name")
@wait_options
def resume(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Start a suspended job again from its suspend savepoint (spec.state: running)."""
    before, after = _patch(kube, name, lambda job: None if (job.get("spec") or {}).get("state", "running") == "running"
                           else {"state": "running"})
    said = "already running" if before is after else "resume requested"
    _console(stderr=True).print(f"streamjob.streamjob.io/{name} {said}")
    if wait:
        generation = int(after["metadata"]["generation"])
        message = _wait(kube, name, "the job to run", timeout or DEFAULT_WAIT_SECONDS, lambda job: waits.running(job, generation))
        _console(stderr=True).print(f"streamjob.streamjob.io/{name} {message}")


@cli.command()
@connection_options
@click.argument("name")
@wait_options
def restart(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Restart the driver from the latest checkpoint (bumps spec.restartNonce)."""
    _, after = _patch(kube, name, lambda job: {"restartNonce": int((job.get("spec") or {}).get("restartNonce", 0)) + 1})
    nonce = int(after["spec"]["restartNonce"])
    _console(stderr=True).print(f"streamjob.streamjob.io/{name} restart requested (restartNonce={nonce})")
    if wait:
        message = _wait(kube, name, "the restart", timeout or DEFAULT_WAIT_SECONDS, lambda job: waits.restarted(job, nonce))
        _console(stderr=True).print(f"streamjob.streamjob.io/{name} {message}")


# ---- reading the driver and S3 ---------------------------------------------------------


@cli.command()
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


@cli.command()
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
            _emit({"uri": savepoint_uri, "valid": False, "error": str(exc), "kind": type(exc).__name__}, output)
        raise SavepointRefused(str(exc)) from None
    if output != "table":
        _emit(found, output)
        return
    con = _console()
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


# ---- entry point ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    err = _console(stderr=True)
    try:
        result = cli.main(args=argv, prog_name="kubectl streamjob", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        exc.show()
        return EXIT_USAGE
    except click.exceptions.Abort:
        err.print("aborted", markup=False)
        return EXIT_ERROR
    except click.ClickException as exc:
        exc.show()
        return EXIT_ERROR
    except CliError as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_ERROR
    except WaitFailed as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_WAIT_FAILED
    except SavepointRefused as exc:
        err.print(f"error: savepoint refused: {exc}", markup=False)
        return EXIT_SAVEPOINT_INVALID
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # the API server, S3 or the network: a message, not a traceback
        err.print(f"error: {_describe(exc)}", markup=False)
        return EXIT_ERROR
    return result if isinstance(result, int) else EXIT_OK


def _describe(exc: Exception) -> str:
    import urllib3

    if isinstance(exc, urllib3.exceptions.HTTPError):
        return f"cannot reach the API server: {exc}"
    if type(exc).__module__.startswith(("botocore", "boto3")):
        hint = " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give --job NAME)" if type(exc).__name__ == "NoCredentialsError" else ""
        return f"S3: {exc}{hint}"
    return f"{type(exc).__name__}: {exc}"
