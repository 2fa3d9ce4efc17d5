"""What the plugin shows: rows, ages, the status story and the script formats.

Pure: takes StreamJob and Event dicts (as the API server returns them) and the
current time, returns values. Called by ``streamjob_cli.main``; tested as tables.
No client, no clock, no terminal here: ``main`` renders the rows with rich.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 (``Z`` or an offset; fractions allowed) -> aware datetime, else None."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def seconds_since(value: str | None, now: datetime) -> float | None:
    when = parse_time(value)
    return None if when is None else max(0.0, (now - when).total_seconds())


def human_duration(seconds: float | None) -> str:
    """kubectl's way of saying an age: 45s, 3m12s, 2h5m, 3d4h, 400d; '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 and s % 60 else f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m}m" if h < 8 and m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d{h}h" if d < 8 and h else f"{d}d"


def human_bytes(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def dump(value: Any, fmt: str) -> str:
    """``-o json`` / ``-o yaml`` text of a value (JSON-able)."""
    if fmt == "json":
        return json.dumps(value, indent=2, sort_keys=False, default=str)
    if fmt == "yaml":
        return yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip("\n")
    raise ValueError(f"-o {fmt}: must be one of json, yaml")


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]


# ---- list --------------------------------------------------------------------------------


def watermark_lag(status: dict[str, Any], now: datetime) -> float | None:
    """now - the driver's event-time watermark, in seconds; None when the job reports none
    (no event time in the query, or Spark's initial 1970 watermark)."""
    watermark = parse_time((status.get("job") or {}).get("watermark"))
    if watermark is None or watermark.year <= 1970:
        return None
    return max(0.0, (now - watermark).total_seconds())


def batch_of(status: dict[str, Any]) -> int | None:
    """The latest committed batch (the checkpoint), else the last started one."""
    checkpoint = status.get("lastCheckpoint") or {}
    if checkpoint.get("batchId") is not None:
        return int(checkpoint["batchId"])
    last = (status.get("job") or {}).get("lastBatchId")
    return None if last is None else int(last)


def summary(job: dict[str, Any], now: datetime) -> dict[str, Any]:
    """One job as ``list -o json`` prints it."""
    meta, spec, status = job.get("metadata", {}), job.get("spec", {}), job.get("status") or {}
    last_savepoint = status.get("lastSavepoint")
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "desiredState": spec.get("state", "running"),
        "state": status.get("state"),
        "ready": bool(status.get("ready", False)),
        "batch": batch_of(status),
        "watermark": (status.get("job") or {}).get("watermark"),
        "watermarkLagSeconds": watermark_lag(status, now),
        "lastSavepoint": last_savepoint,
        "lastSavepointAgeSeconds": seconds_since((last_savepoint or {}).get("time"), now),
        "restarts": int(status.get("totalRestarts", 0)),
        "ageSeconds": seconds_since(meta.get("creationTimestamp"), now),
    }


def list_table(jobs: list[dict[str, Any]], now: datetime, *, all_namespaces: bool) -> Table:
    """The ``list`` table. WATERMARK LAG only appears when some job reports a watermark."""
    rows = [summary(j, now) for j in jobs]
    with_lag = any(r["watermarkLagSeconds"] is not None for r in rows)
    columns = (["NAMESPACE"] if all_namespaces else []) + ["NAME", "STATE", "READY", "BATCH"]
    columns += (["WATERMARK LAG"] if with_lag else []) + ["LAST SAVEPOINT", "RESTARTS", "AGE"]
    out: list[list[str]] = []
    for r in rows:
        cells = ([r["namespace"] or ""] if all_namespaces else []) + [
            r["name"] or "", r["state"] or "-", "True" if r["ready"] else "False",
            "-" if r["batch"] is None else str(r["batch"]),
        ]
        if with_lag:
            cells.append(human_duration(r["watermarkLagSeconds"]))
        cells += [human_duration(r["lastSavepointAgeSeconds"]), str(r["restarts"]), human_duration(r["ageSeconds"])]
        out.append(cells)
    return Table(columns, out)


# ---- history ----------------------------------------------------------------------------


def history(job: dict[str, Any], now: datetime, sizes: dict[str, int | None] | None = None) -> list[dict[str, Any]]:
    """Savepoints recorded in status, newest first; ``sizes`` (path -> bytes) when read from S3."""
    status = job.get("status") or {}
    entries = list(status.get("savepointHistory") or [])
    last = status.get("lastSavepoint")
    if last and all(e.get("path") != last.get("path") for e in entries):
        entries.insert(0, last)
    out = []
    for e in entries:
        row = {
            "path": e.get("path"), "batch": e.get("batchId"), "trigger": e.get("trigger"), "time": e.get("time"),
            "ageSeconds": seconds_since(e.get("time"), now),
        }
        if sizes is not None:
            row["sizeBytes"] = sizes.get(e.get("path", ""))
        elif e.get("sizeBytes") is not None:  # recorded by the operator from the manifest
            row["sizeBytes"] = e["sizeBytes"]
        out.append(row)
    return out


def history_table(rows: list[dict[str, Any]]) -> Table:
    with_size = any("sizeBytes" in r for r in rows)
    columns = ["PATH", "BATCH", "TRIGGER", "AGE"] + (["SIZE"] if with_size else [])
    out = []
    for r in rows:
        cells = [r["path"] or "", "-" if r["batch"] is None else str(r["batch"]), r["trigger"] or "-", human_duration(r["ageSeconds"])]
        if with_size:
            cells.append(human_bytes(r.get("sizeBytes")))
        out.append(cells)
    return Table(columns, out)


# ---- status -----------------------------------------------------------------------------


def event_time(event: dict[str, Any]) -> str | None:
    return (event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp")
            or event.get("firstTimestamp"))


def story(events: list[dict[str, Any]], now: datetime, limit: int = 15) -> list[dict[str, Any]]:
    """The job's events, oldest first, the last ``limit`` of them."""
    def order(e: dict[str, Any]) -> tuple[datetime, int]:
        # times have second resolution; within a second, the API server's write order
        rv = str((e.get("metadata") or {}).get("resourceVersion") or "")
        return parse_time(event_time(e)) or datetime.min.replace(tzinfo=timezone.utc), int(rv) if rv.isdigit() else 0

    ordered = sorted(events, key=order)
    return [
        {
            "time": event_time(e), "ageSeconds": seconds_since(event_time(e), now), "type": e.get("type"),
            "reason": e.get("reason"), "message": e.get("message", ""), "count": e.get("count") or 1,
        }
        for e in ordered[-limit:]
    ]


def status_document(job: dict[str, Any], events: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """What ``status -o json`` prints: the summary, the raw status and the story."""
    return {**summary(job, now), "generation": (job.get("metadata") or {}).get("generation"),
            "status": job.get("status") or {}, "events": story(events, now)}


def status_facts(job: dict[str, Any], now: datetime) -> list[tuple[str, str]]:
    """The header of ``status``: label, value pairs."""
    meta, status = job.get("metadata", {}), job.get("status") or {}
    s = summary(job, now)
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    facts = [
        ("Name", f"{meta.get('namespace')}/{meta.get('name')}"),
        ("State", f"{s['state'] or '-'} (desired {s['desiredState']})"),
        ("Ready", "True" if s["ready"] else "False"),
        ("Generation", f"{generation} (observed {observed if observed is not None else '-'})"),
        ("Driver pod", status.get("driverPod") or "-"),
        ("Batch", "-" if s["batch"] is None else str(s["batch"])),
    ]
    job_metrics = status.get("job") or {}
    if job_metrics.get("watermark"):
        facts.append(("Watermark", f"{job_metrics['watermark']} (lag {human_duration(s['watermarkLagSeconds'])})"))
    if job_metrics.get("processedRowsPerSecond") is not None:
        facts.append(("Rows/s", f"{job_metrics.get('inputRowsPerSecond') or 0:.1f} in, {job_metrics['processedRowsPerSecond']:.1f} processed"))
    facts.append(("Restarts", f"{status.get('restartCount', 0)} since last start, {status.get('totalRestarts', 0)} in total"))
    last = status.get("lastSavepoint")
    if last:
        facts.append(("Last savepoint", f"{last.get('path')} (batch {last.get('batchId')}, {last.get('trigger')}, "
                                         f"{human_duration(s['lastSavepointAgeSeconds'])} ago)"))
    op = status.get("operation")
    if op:
        facts.append(("Operation", f"{op.get('kind')} in phase {op.get('phase')}" + (f": {op['message']}" if op.get("message") else "")))
    blocked = status.get("blockedChange")
    if blocked:
        facts.append(("Blocked change", f"{blocked.get('reason')}: {blocked.get('message', '')}"))
    error = status.get("reconcileError")
    if error:
        facts.append(("Reconcile error", f"{error.get('reason')}: {error.get('message', '')} (x{error.get('count', 1)})"))
    if status.get("lastError"):
        facts.append(("Last error", status["lastError"]))
    return facts


def conditions_table(job: dict[str, Any], now: datetime) -> Table:
    rows = [
        [c.get("type", ""), c.get("status", ""), c.get("reason", ""), human_duration(seconds_since(c.get("lastTransitionTime"), now)),
         c.get("message", "")]
        for c in (job.get("status") or {}).get("conditions") or []
    ]
    return Table(["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"], rows)


def story_table(entries: list[dict[str, Any]]) -> Table:
    rows = [
        [human_duration(e["ageSeconds"]) + " ago", e["type"] or "", e["reason"] or "",
         e["message"] + (f" (x{e['count']})" if e["count"] > 1 else "")]
        for e in entries
    ]
    return Table(["WHEN", "TYPE", "REASON", "MESSAGE"], rows)
