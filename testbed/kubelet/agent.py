"""The kubelet's control loop: watches all pods, binds unscheduled ones to its node, runs its own.

Called by ``testbed.kubelet.__main__``. The test bed has a single node and no
scheduler, so the kubelet also plays the scheduler's part through the
``pods/binding`` subresource.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from kubernetes import watch

from testbed.kubelet.api import ApiException, KubeletApi, Obj
from testbed.kubelet.images import Environment
from testbed.kubelet.ipam import AddressPool
from testbed.kubelet.logserver import LogServer
from testbed.kubelet.node import CAPACITY, NodeAgent
from testbed.kubelet.volumes import VolumeBuilder
from testbed.kubelet.worker import KubeletContext, PodWorker

log = logging.getLogger(__name__)

WATCH_SECONDS = 60


class Kubelet:
    def __init__(
        self,
        *,
        kubeconfig: str,
        node_name: str,
        state_dir: Path,
        apiserver_host: str,
        apiserver_port: int,
        image_env: Environment,
        kubelet_version: str,
        host_ip: str = "127.0.0.1",
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        serving: tuple[Path, Path, Path] | None = None,
    ) -> None:
        """``serving``: (cert, key, client CA) for the log endpoint; without it ``kubectl logs`` fails."""
        self.api = KubeletApi(kubeconfig)
        self.node_name = node_name
        self.log_server: LogServer | None = None
        if serving:
            cert, key, client_ca = serving
            self.log_server = LogServer(
                host=host_ip, logs_dir=state_dir / "logs", cert=cert, key=key, client_ca=client_ca,
                pod_log_dir=self.pod_log_dir,
            )
        port = self.log_server.port if self.log_server else 0
        self.node = NodeAgent(self.api, node_name, host_ip, kubelet_version, port)
        self.ctx = KubeletContext(
            api=self.api,
            node_name=node_name,
            host_ip=host_ip,
            apiserver_host=apiserver_host,
            apiserver_port=apiserver_port,
            pods_dir=state_dir / "pods",
            logs_dir=state_dir / "logs",
            pool=AddressPool(),
            image_env=image_env,
            volumes=VolumeBuilder(self.api, dict(CAPACITY)),
            node_allocatable=dict(CAPACITY),
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self.workers: dict[str, PodWorker] = {}
        self.stop_event = threading.Event()

    def pod_log_dir(self, namespace: str, name: str) -> Path | None:
        """The log folder of the pod of that name now running here, else the newest one."""
        key = f"{namespace}/{name}"
        for worker in list(self.workers.values()):
            if worker.key == key:
                return worker.log_dir
        found = sorted(self.ctx.logs_dir.glob(f"{namespace}_{name}_*"), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

    def run(self) -> None:
        if self.log_server:
            self.log_server.start()
        self.node.register()
        threading.Thread(target=self.node.heartbeat, args=(self.stop_event,), name="heartbeat", daemon=True).start()
        log.info("Started kubelet node=%s pods_dir=%s", self.node_name, self.ctx.pods_dir)
        while not self.stop_event.is_set():
            try:
                listing = self.api.list_pods()
                seen = set()
                for pod in listing.get("items", []):
                    seen.add(pod["metadata"]["uid"])
                    self.handle("ADDED", pod)
                for uid in [u for u in self.workers if u not in seen]:
                    self.workers.pop(uid).removed()
                self._watch(listing["metadata"]["resourceVersion"])
            except Exception as exc:
                if self.stop_event.is_set():
                    break
                log.warning("Restarted pod watch error=%s", exc)
                self.stop_event.wait(1)

    def _watch(self, resource_version: str) -> None:
        while not self.stop_event.is_set():
            w = watch.Watch()
            for event in w.stream(
                self.api.core.list_pod_for_all_namespaces,
                resource_version=resource_version,
                timeout_seconds=WATCH_SECONDS,
                allow_watch_bookmarks=True,
            ):
                if self.stop_event.is_set():
                    w.stop()
                    return
                kind = event["type"]
                raw: Obj = event["raw_object"]
                if kind == "ERROR":
                    if raw.get("code") == 410:
                        return  # resource version too old: relist
                    raise RuntimeError(f"watch error: {raw}")
                resource_version = raw["metadata"]["resourceVersion"]
                if kind != "BOOKMARK":
                    self.handle(kind, raw)

    def handle(self, kind: str, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        spec = pod.get("spec") or {}
        if kind == "DELETED":
            worker = self.workers.pop(uid, None)
            if worker:
                worker.removed()
            return
        node = spec.get("nodeName")
        if not node:
            if not meta.get("deletionTimestamp") and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                self._bind(pod)
            return
        if node != self.node_name:
            return
        worker = self.workers.get(uid)
        if worker is None:
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                if meta.get("deletionTimestamp"):
                    self.api.delete_pod_now(pod)
                return
            worker = PodWorker(self.ctx, pod)
            self.workers[uid] = worker
            worker.start()
        worker.update(pod)

    def _bind(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            self.api.bind(pod, self.node_name)
            log.info("Bound pod pod=%s/%s node=%s", meta["namespace"], meta["name"], self.node_name)
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("Failed to bind pod pod=%s/%s status=%s body=%s", meta["namespace"], meta["name"], exc.status, exc.body)

    def stop(self) -> None:
        self.stop_event.set()
        if self.log_server:
            self.log_server.stop()
        workers = list(self.workers.values())
        for worker in workers:
            worker.shutdown()
        for worker in workers:
            worker.join(timeout=15)
        log.info("Stopped kubelet node=%s pods=%d", self.node_name, len(workers))
