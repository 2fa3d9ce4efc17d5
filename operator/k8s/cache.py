"""What the operator's watches delivered: StreamJob bodies and driver pods, so a pass reads without a request.

Fed by ``streamjob_operator.handlers`` (kopf's watch events on StreamJobs and on
driver pods, and the responses of the operator's own status writes); read by
``Clients.get_streamjob`` and ``Clients.driver_pods``. The watches cost one
long-lived request per resource kind, whatever the number of jobs, where a GET
and a LIST per pass cost two requests per job every timer tick.

Freshness, as client-go's informers keep it: an object's ``resourceVersion``
orders its versions (the API server's are etcd revisions, integers), so a newer
version never loses to an older one whichever arrives first; a deletion leaves a
tombstone with its version, so a late event or listing cannot resurrect a pod.
Where a version is not an integer, the cache answers nothing and the caller
makes the request.

Driver pods: a job's pods come from the cache only after one authoritative LIST
for that job (``listed``), and not in the pass after one of the operator's own
pod mutations for it (``touched``: its watch event may not be here yet), so a pass
never misses a driver the operator has created. Cached bodies are shared: callers
must not change them. They are kept without ``metadata.managedFields`` (server-side
apply's bookkeeping; nothing reads it), and a driver pod as its metadata and status
only: what ``observe.driver_pod`` reads, the only reader of cached pods (a driver pod's
spec, its Spark arguments, environment and volumes, is most of its body). At 1,000
jobs the cache holds a body of every job and of every driver pod.
"""

from __future__ import annotations

import threading
from typing import Any

Key = tuple[str, str]


def version(body: dict[str, Any] | None) -> int | None:
    """The object's resourceVersion as an integer, or None when there is none or it is not one."""
    try:
        return int((body or {}).get("metadata", {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def slim(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without ``metadata.managedFields`` (a shallow copy when it had them; ``body`` is not changed)."""
    meta = body.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return body
    return {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def slim_pod(body: dict[str, Any]) -> dict[str, Any]:
    """A driver pod as the cache keeps it: kind, metadata (no managedFields) and status; of the spec only
    the node it is on (a lost driver's replacement avoids that node)."""
    kept: dict[str, Any] = {k: body[k] for k in ("apiVersion", "kind", "metadata", "status") if k in body}
    node = (body.get("spec") or {}).get("nodeName")
    if node:
        kept["spec"] = {"nodeName": node}
    return slim(kept)


class ReadCache:
    """StreamJob bodies by (namespace, name); driver pods by (namespace, job) and name; thread-safe."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # off (--no-read-cache): every read is a request, as before the cache
        self._lock = threading.Lock()
        self._jobs: dict[Key, dict[str, Any]] = {}
        self._job_gone: dict[Key, int] = {}
        self._pods: dict[Key, dict[str, dict[str, Any]]] = {}
        self._pod_gone: dict[Key, int] = {}  # (namespace, pod name) -> version of its deletion
        self._listed: set[Key] = set()
        self._touched: set[Key] = set()

    # --- StreamJobs -----------------------------------------------------------------------
    def saw_job(self, body: dict[str, Any], deleted: bool = False) -> None:
        """A StreamJob body from a watch event, a handler's arguments or a write's response."""
        meta = body.get("metadata") or {}
        key, v = (str(meta.get("namespace") or "default"), str(meta.get("name"))), version(body)
        if v is None:
            return
        with self._lock:
            if deleted:
                self._jobs.pop(key, None)
                self._job_gone[key] = max(v, self._job_gone.get(key, 0))
                return
            if v <= self._job_gone.get(key, -1):
                return
            known = version(self._jobs.get(key))
            if known is None or v > known:
                self._jobs[key] = slim(body)

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest body seen of the job, or None (not seen: make the request)."""
        if not self.enabled:
            return None
        with self._lock:
            return self._jobs.get((namespace, name))

    def forget_job(self, namespace: str, name: str) -> None:
        """After a GET found it gone (404): the next read asks again."""
        with self._lock:
            self._jobs.pop((namespace, name), None)

    # --- driver pods ---------------------------------------------------------------------
    def saw_pod(self, job: str, body: dict[str, Any], deleted: bool = False) -> None:
        """A driver pod from the watch (kopf's event; ``deleted`` for a DELETED event)."""
        meta = body.get("metadata") or {}
        namespace, name, v = str(meta.get("namespace") or "default"), str(meta.get("name")), version(body)
        if v is None:
            return
        with self._lock:
            self._merge((namespace, job), namespace, name, body, v, deleted)

    def _merge(self, key: Key, namespace: str, name: str, body: dict[str, Any], v: int, deleted: bool) -> None:
        pods = self._pods.setdefault(key, {})
        if v <= self._pod_gone.get((namespace, name), -1):
            return
        known = version(pods.get(name))
        if known is not None and v <= known:
            return
        if deleted:
            pods.pop(name, None)
            self._pod_gone[(namespace, name)] = v
        else:
            pods[name] = slim_pod(body)

    def listed(self, namespace: str, job: str, items: list[dict[str, Any]], list_version: str | None) -> None:
        """An authoritative LIST of the job's driver pods, at ``list_version``: what it lacks and is older is gone."""
        try:
            at = int(list_version or "")
        except ValueError:
            return
        key = (namespace, job)
        with self._lock:
            seen = set()
            for item in items:
                v = version(item)
                name = str((item.get("metadata") or {}).get("name"))
                seen.add(name)
                if v is not None:
                    self._merge(key, namespace, name, item, v, deleted=False)
            pods = self._pods.setdefault(key, {})
            for name in [n for n, body in pods.items() if n not in seen and (version(body) or 0) <= at]:
                del pods[name]
                self._pod_gone[(namespace, name)] = at
            self._listed.add(key)
            self._touched.discard(key)

    def touched(self, namespace: str, job: str) -> None:
        """The operator created or deleted one of the job's pods: the next read lists."""
        with self._lock:
            self._touched.add((namespace, job))

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]] | None:
        """The job's driver pods, or None when only a LIST can say (never listed, or touched since)."""
        key = (namespace, job)
        if not self.enabled:
            return None
        with self._lock:
            if key not in self._listed or key in self._touched:
                return None
            return list(self._pods.get(key, {}).values())

    def forget(self, namespace: str, job: str) -> None:
        """A deleted job: drop what is kept for it (tombstones of its pods go with their names' reuse)."""
        key = (namespace, job)
        with self._lock:
            self._jobs.pop(key, None)
            for name in self._pods.pop(key, {}):
                self._pod_gone.pop((namespace, name), None)
            self._listed.discard(key)
            self._touched.discard(key)
