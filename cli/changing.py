"""The commands that change a job: ``savepoint``, ``suspend``, ``resume`` and ``restart``, and their ``--wait``.

Registered on the plugin's group by ``streamjob_cli.main``. Each changes only what
the operator already understands (``spec.savepointNonce``, ``spec.restartNonce``,
``spec.state``) with a patch guarded by the resourceVersion, and with ``--wait``
polls the job until the wait rules (``streamjob_cli.waits``) say it is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from . import waits
from .kube import CliError, Kube, job_ref
from .options import connection_options, console, wait_options

POLL_SECONDS = 1.0
DEFAULT_WAIT_SECONDS = 600
CONFLICT_RETRIES = 5


class WaitFailed(Exception):
    """A ``--wait`` saw the change fail or did not see it finish in time."""


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
    err = console(stderr=True)
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


@click.command()
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
    console(stderr=True).print(f"streamjob.streamjob.io/{name} savepoint requested (savepointNonce={nonce})")
    if not wait:
        return
    limit = timeout or int((after["spec"].get("savepoint") or {}).get("timeoutSeconds", DEFAULT_WAIT_SECONDS)) + 120
    path = _wait(kube, name, "the savepoint", limit, lambda job: waits.savepoint(job, nonce, before_path))
    click.echo(path)


@click.command()
@connection_options
@click.argument("name")
@wait_options
def suspend(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Stop the job with a savepoint and keep it stopped (spec.state: suspended)."""
    before, after = _patch(kube, name, lambda job: None if (job.get("spec") or {}).get("state") == "suspended"
                           else {"state": "suspended"})
    said = "already suspended" if before is after else "suspend requested"
    console(stderr=True).print(f"streamjob.streamjob.io/{name} {said}")
    if wait:
        generation = int(after["metadata"]["generation"])
        blocked = (before.get("status") or {}).get("blockedChange")
        _wait(kube, name, "the suspension", timeout or DEFAULT_WAIT_SECONDS, lambda job: waits.suspended(job, generation, blocked))
        console(stderr=True).print(f"streamjob.streamjob.io/{name} suspended")


@click.command()
@connection_options
@click.argument("name")
@wait_options
def resume(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Start a suspended job again from its suspend savepoint (spec.state: running)."""
    before, after = _patch(kube, name, lambda job: None if (job.get("spec") or {}).get("state", "running") == "running"
                           else {"state": "running"})
    said = "already running" if before is after else "resume requested"
    console(stderr=True).print(f"streamjob.streamjob.io/{name} {said}")
    if wait:
        generation = int(after["metadata"]["generation"])
        message = _wait(kube, name, "the job to run", timeout or DEFAULT_WAIT_SECONDS, lambda job: waits.running(job, generation))
        console(stderr=True).print(f"streamjob.streamjob.io/{name} {message}")


@click.command()
@connection_options
@click.argument("name")
@wait_options
def restart(kube: Kube, name: str, wait: bool, timeout: int | None) -> None:
    """Restart the driver from the latest checkpoint (bumps spec.restartNonce)."""
    _, after = _patch(kube, name, lambda job: {"restartNonce": int((job.get("spec") or {}).get("restartNonce", 0)) + 1})
    nonce = int(after["spec"]["restartNonce"])
    console(stderr=True).print(f"streamjob.streamjob.io/{name} restart requested (restartNonce={nonce})")
    if wait:
        message = _wait(kube, name, "the restart", timeout or DEFAULT_WAIT_SECONDS, lambda job: waits.restarted(job, nonce))
        console(stderr=True).print(f"streamjob.streamjob.io/{name} {message}")
