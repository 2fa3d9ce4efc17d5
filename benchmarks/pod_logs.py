"""A pod's log kept past the pod: followed through the API while the pod lives, read once it is gone.

Called by ``benchmarks/operator_bench.py`` for the driver an upgrade replaces: the test bed's node
(a real kubelet) drops a pod's log with the pod, so a log read after the deletion must have been read
while the pod ran. ``TestBed.pod_log`` serves a pod that still exists.
"""

from __future__ import annotations

import threading

import urllib3
from kubernetes import client


class FollowedLog:
    """Follows a pod's container log (``kubectl logs -f``) in a background thread, from its first line until the
    container ends; ``text()`` waits for that end and returns the whole log."""

    def __init__(self, core: client.CoreV1Api, namespace: str, pod: str, container: str | None = None) -> None:
        """The container must have started. The stream is open when this returns (a 4xx raises here), so nothing the
        container writes from now on is missed, however soon the pod is deleted."""
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        response = core.read_namespaced_pod_log(pod, namespace, container=container, follow=True, _preload_content=False)
        self._thread = threading.Thread(target=self._read, args=(response,), name=f"log-{pod}", daemon=True)
        self._thread.start()

    def _read(self, response: urllib3.BaseHTTPResponse) -> None:
        try:
            # read1: what has arrived, at once (read(amt) would wait for amt bytes, lost if the connection drops)
            while chunk := response.read1(2**16):
                with self._lock:
                    self._chunks.append(chunk)
        except (urllib3.exceptions.HTTPError, OSError):
            pass  # the connection dropped as the pod went: what was read is kept
        finally:
            response.release_conn()

    def text(self, timeout: float = 60.0) -> str:
        """The log read so far: all of it once the container has ended (waited for up to ``timeout`` seconds)."""
        self._thread.join(timeout)
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace")
