"""One pod's life on the process kubelet: prepare, run, restart, report, terminate, remove.

Called by ``testbed.kubelet.agent``, which starts one ``PodWorker`` thread per pod
bound to the node and forwards every change of the pod object to it.
What a container runtime would do is done with local means: the container is a
process (in a private mount namespace, see ``podinit``) in its own session, its
address is a loopback address of its own, its output goes to a log file.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.kubelet import env as envmod
from testbed.kubelet import imagerun, images
from testbed.kubelet.api import ApiException, KubeletApi, Obj
from testbed.kubelet.ipam import AddressPool
from testbed.kubelet.volumes import Mount, VolumeBuilder, container_mounts

log = logging.getLogger(__name__)

PODINIT = imagerun.PODINIT


def image_paths(pod_dir: Path, environment: images.Environment | None = None) -> list[str]:
    """Host paths that stand for the image's own files: the venv (Spark, the
    installed packages), the repository (editable installs point into it), the
    kubelet's run dir (the pod's home and work dir), and the environment's
    jars, Spark and Java homes. A volume mounted over one of their parents (an
    emptyDir at /tmp, say, when STREAMJOB_CACHE is under /tmp) must not hide them."""
    import sysconfig

    from testbed import locate

    paths = {sys.prefix, str(locate.repo_root()), str(pod_dir.parent.parent),
             sysconfig.get_paths()["purelib"]}
    if environment is not None:
        paths |= {str(p) for p in (environment.jars_dir, environment.spark_home, environment.java_home) if p}
    return sorted(p for p in paths if p and p != "/")
MESSAGE_BYTES = 2048
MESSAGE_LINES = 80


@dataclass
class KubeletContext:
    api: KubeletApi
    node_name: str
    host_ip: str
    apiserver_host: str
    apiserver_port: int
    pods_dir: Path
    logs_dir: Path
    pool: AddressPool
    image_env: images.Environment
    volumes: VolumeBuilder
    node_allocatable: dict[str, str]
    backoff_initial: float = 1.0
    backoff_max: float = 30.0


def main_container(pod: Obj) -> Obj:
    """The one container this kubelet runs: the pod's default container, else its first.

    A process per pod, so sidecars do not run; the default container is the one
    `kubectl logs` picks (annotation kubectl.kubernetes.io/default-container),
    which Spark's executor pods with a pod template's sidecars need: Spark puts
    its executor container after them.
    """
    containers = pod["spec"]["containers"]
    wanted = ((pod.get("metadata") or {}).get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
    return next((c for c in containers if c.get("name") == wanted), containers[0])


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def session_pids(sid: int) -> list[int]:
    """Every live process of a session (a pod's processes, even those reparented to init)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry))
    return found


def kill_session(sid: int) -> None:
    for pid in session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - MESSAGE_BYTES))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-MESSAGE_LINES:])


class PodWorker(threading.Thread):
    def __init__(self, ctx: KubeletContext, pod: Obj) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.ctx = ctx
        self.uid: str = meta["uid"]
        self.key = f"{meta['namespace']}/{meta['name']}"
        self._pod = pod
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._deleting = False
        self._gone = False
        self._shutdown = False
        self._transitions: dict[tuple[str, str], str] = {}
        self._status_base: Obj = {}
        self.pod_dir = ctx.pods_dir / self.uid
        self.log_dir = ctx.logs_dir / f"{meta['namespace']}_{meta['name']}_{self.uid}"
        self.process: subprocess.Popen[bytes] | None = None

    # --- events from the agent -------------------------------------------------
    def update(self, pod: Obj) -> None:
        with self._lock:
            self._pod = pod
            if pod["metadata"].get("deletionTimestamp"):
                self._deleting = True
                self._wake.set()

    def removed(self) -> None:
        with self._lock:
            self._gone = True
            self._deleting = True
            self._wake.set()

    def shutdown(self) -> None:
        with self._lock:
            self._shutdown = True
            self._wake.set()

    @property
    def pod(self) -> Obj:
        with self._lock:
            return self._pod

    def _stopping(self) -> bool:
        return self._deleting or self._shutdown

    def _sleep(self, seconds: float) -> bool:
        """Sleeps unless the pod is being stopped; True when it is."""
        if self._stopping():
            return True
        self._wake.wait(seconds)
        return self._stopping()

    # --- status ----------------------------------------------------------------
    def _condition(self, ctype: str, value: bool) -> Obj:
        status = "True" if value else "False"
        key = (ctype, status)
        if key not in self._transitions:
            self._transitions = {k: v for k, v in self._transitions.items() if k[0] != ctype}
            self._transitions[key] = now()
        return {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": self._transitions[key]}

    def _publish(self, phase: str, container_status: Obj, *, ready: bool, message: str | None = None) -> None:
        if self._gone or self._shutdown:
            return
        pod = self.pod
        ours = {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"}
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") not in ours]
        conditions += [
            self._condition("PodReadyToStartContainers", True),
            self._condition("Initialized", True),
            self._condition("Ready", ready),
            self._condition("ContainersReady", ready),
            self._condition("PodScheduled", True),
        ]
        status = {
            **self._status_base,
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [container_status],
            "message": message,
        }
        try:
            self.ctx.api.patch_pod_status(pod, status)
            log.info("Updated pod status pod=%s phase=%s ready=%s", self.key, phase, ready)
        except ApiException as exc:
            if exc.status in (404, 409):
                log.info("Skipped status update of a removed pod pod=%s status=%s", self.key, exc.status)
            else:
                log.warning("Failed to update pod status pod=%s error=%s", self.key, exc)
        except Exception as exc:  # a kubelet keeps going when the API server hiccups
            log.warning("Failed to update pod status pod=%s error=%s", self.key, exc)

    def _container_status(
        self,
        container: Obj,
        state: Obj,
        *,
        ready: bool,
        restarts: int,
        last: Obj | None,
        container_id: str | None,
    ) -> Obj:
        full_state = {"waiting": None, "running": None, "terminated": None, **state}
        status = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": f"testbed://{container.get('image', '')}",
            "ready": ready,
            "started": "running" in state,
            "restartCount": restarts,
            "state": full_state,
            "lastState": {"terminated": last} if last else {},
        }
        if container_id:
            status["containerID"] = container_id
        return status

    # --- the pod's life ----------------------------------------------------------
    def run(self) -> None:
        try:
            self._live()
        except Exception:
            log.exception("Pod worker crashed pod=%s", self.key)
        finally:
            self._cleanup()

    def _live(self) -> None:
        pod = self.pod
        ip = self.ctx.pool.allocate(self.uid)
        self._status_base = {
            "hostIP": self.ctx.host_ip,
            "hostIPs": [{"ip": self.ctx.host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now(),
        }
        container = main_container(pod)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        log.info("Admitted pod pod=%s uid=%s ip=%s image=%s", self.key, self.uid, ip, container.get("image"))
        waiting = {"waiting": {"reason": "ContainerCreating", "message": None}}
        self._publish("Pending", self._container_status(container, waiting, ready=False, restarts=0, last=None, container_id=None), ready=False)

        prepared = self._prepare(container)
        if prepared is None:
            self._await_removal()
            return
        argv, env, mounts, cwd, in_image = prepared

        restarts = 0
        last: Obj | None = None
        policy = pod["spec"].get("restartPolicy") or "Always"
        log_path = self.log_dir / f"{container['name']}.log"
        while True:
            process = self._start(argv, env, mounts, cwd, log_path, in_image)
            container_id = f"process://{process.pid}"
            started = now()
            ready = not container.get("readinessProbe")
            running = {"running": {"startedAt": started}}
            self._publish("Running", self._container_status(container, running, ready=ready, restarts=restarts, last=last, container_id=container_id), ready=ready)
            returncode = self._wait(process, container, running, restarts, last, container_id, ready)
            if returncode is None:
                returncode = self._terminate(process)
            kill_session(process.pid)
            code = exit_code(returncode)
            terminated = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "message": self._termination_message(container, code) or None,
                "startedAt": started,
                "finishedAt": now(),
                "containerID": container_id,
            }
            log.info("Container exited pod=%s container=%s exit_code=%d", self.key, container["name"], code)
            restart = not self._stopping() and (policy == "Always" or (policy == "OnFailure" and code != 0))
            if not restart:
                phase = "Succeeded" if code == 0 else "Failed"
                self._publish(phase, self._container_status(container, {"terminated": terminated}, ready=False, restarts=restarts, last=last, container_id=container_id), ready=False)
                break
            restarts += 1
            last = terminated
            delay = min(self.ctx.backoff_initial * 2 ** (restarts - 1), self.ctx.backoff_max)
            backoff = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {delay:.0f}s restarting failed container={container['name']} pod={self.key}"}}
            self._publish("Running", self._container_status(container, backoff, ready=False, restarts=restarts, last=last, container_id=container_id), ready=False)
            if self._sleep(delay):
                phase = "Succeeded" if code == 0 else "Failed"
                self._publish(phase, self._container_status(container, {"terminated": terminated}, ready=False, restarts=restarts - 1, last=None, container_id=container_id), ready=False)
                break
        self._await_removal()

    def _prepare(self, container: Obj) -> tuple[list[str], dict[str, str], list[Mount], str, Obj] | None:
        attempts = 0
        while not self._stopping():
            pod = {**self.pod, "status": {**(self.pod.get("status") or {}), **self._status_base}}
            namespace = pod["metadata"]["namespace"]
            try:
                image = images.resolve(container.get("image", ""), self.ctx.image_env)
                pod_env = envmod.container_env(
                    pod,
                    container,
                    service_env=envmod.kubernetes_service_env(self.ctx.apiserver_host, self.ctx.apiserver_port),
                    get_config_map=lambda name: self.ctx.api.get_config_map(namespace, name),
                    get_secret=lambda name: self.ctx.api.get_secret(namespace, name),
                    node_allocatable=self.ctx.node_allocatable,
                )
                command = [envmod.expand(str(c), pod_env) for c in container.get("command") or []]
                args = [envmod.expand(str(a), pod_env) for a in container.get("args") or []]
                env = image.container_env(pod_env, self._status_base["podIP"])
                env.setdefault("HOSTNAME", pod["spec"].get("hostname") or pod["metadata"]["name"])
                in_image: Obj = {}
                if image.root is not None:
                    in_image = imagerun.run_spec(pod, container, image, self.pod_dir / "layer")
                    env.setdefault("HOME", imagerun.home(image, in_image["user"][0]))
                    cwd = container.get("workingDir") or image.working_dir or "/"
                else:
                    env.setdefault("HOME", str(self.pod_dir / "home"))
                    cwd = container.get("workingDir") or str(self.pod_dir / "work-dir")
                if env["HOME"].startswith(str(self.pod_dir)):
                    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
                argv = image.argv(command, args, env)
                volume_paths = self.ctx.volumes.materialise(pod, self.pod_dir)
                mounts = container_mounts(container, volume_paths, pod["metadata"]["name"])
                mounts.append(self._termination_log_mount(container))
                return argv, env, mounts, cwd, in_image
            except images.ImageNotFound as exc:
                reason = "ErrImagePull" if attempts % 2 == 0 else "ImagePullBackOff"
                self._waiting(container, reason, str(exc))
                delay = 5.0
            except envmod.ConfigError as exc:
                self._waiting(container, "CreateContainerConfigError", str(exc))
                delay = 2.0
            except ApiException as exc:
                self._waiting(container, "CreateContainerConfigError", f"API error {exc.status}: {exc.reason}")
                delay = 2.0
            attempts += 1
            log.info("Could not start container yet pod=%s attempt=%d", self.key, attempts)
            if self._sleep(delay):
                break
        return None

    def _waiting(self, container: Obj, reason: str, message: str) -> None:
        state = {"waiting": {"reason": reason, "message": message}}
        self._publish("Pending", self._container_status(container, state, ready=False, restarts=0, last=None, container_id=None), ready=False)

    def _termination_log_mount(self, container: Obj) -> Mount:
        source = self.pod_dir / "termination-log"
        source.write_bytes(b"")
        source.chmod(0o666)  # the container's user may be anyone
        return Mount(str(source), str(container.get("terminationMessagePath") or "/dev/termination-log"), False)

    def _termination_message(self, container: Obj, code: int) -> str:
        written: str
        try:
            written = (self.pod_dir / "termination-log").read_bytes()[:4096].decode(errors="replace")
        except OSError:
            written = ""
        if written.strip():
            return written
        if container.get("terminationMessagePolicy") == "FallbackToLogsOnError" and code != 0:
            return log_tail(self.log_dir / f"{container['name']}.log")
        return ""

    def _start(self, argv: list[str], env: dict[str, str], mounts: list[Mount], cwd: str, log_path: Path,
               in_image: Obj) -> subprocess.Popen[bytes]:
        spec_path = self.pod_dir / "container.json"
        spec: Obj = {"argv": argv, "env": env, "cwd": cwd, "mounts": [m.to_json() for m in mounts]}
        if in_image:
            # each start of the container gets a fresh writable layer, as in a container runtime
            shutil.rmtree(in_image["layer"], ignore_errors=True)
            spec.update(in_image)
        else:
            spec["keep"] = image_paths(self.pod_dir, self.ctx.image_env)
        spec_path.write_text(json.dumps(spec))
        spec_path.chmod(0o600)
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", PODINIT, str(spec_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                cwd="/",
                env={},
            )
        self.process = process
        (self.log_dir / "pid").write_text(str(process.pid))
        log.info("Started container pod=%s pid=%d argv=%s", self.key, process.pid, " ".join(argv)[:300])
        return process

    def _probe(self, container: Obj) -> bool:
        probe = container.get("readinessProbe") or {}
        ip = self._status_base["podIP"]
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = self._port(container, get.get("port"))
                scheme = str(get.get("scheme", "HTTP")).lower()
                url = f"{scheme}://{get.get('host') or ip}:{port}{get.get('path', '/')}"
                request = urllib.request.Request(url, headers={h["name"]: h["value"] for h in get.get("httpHeaders") or []})
                import ssl

                with urllib.request.urlopen(request, timeout=timeout, context=ssl._create_unverified_context() if scheme == "https" else None) as response:
                    return 200 <= int(response.status) < 400
            if "tcpSocket" in probe:
                port = self._port(container, probe["tcpSocket"].get("port"))
                with socket.create_connection((probe["tcpSocket"].get("host") or ip, port), timeout=timeout):
                    return True
        except Exception:
            return False
        return True  # exec and grpc probes are not run by the test bed; treated as passing

    @staticmethod
    def _port(container: Obj, port: Any) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in container.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"named port {port!r} not declared")

    def _wait(
        self,
        process: subprocess.Popen[bytes],
        container: Obj,
        running: Obj,
        restarts: int,
        last: Obj | None,
        container_id: str,
        ready: bool,
    ) -> int | None:
        """Waits for the process to exit (its returncode) or for the pod to be stopped (None)."""
        probe = container.get("readinessProbe")
        period = float((probe or {}).get("periodSeconds", 10))
        next_probe = time.monotonic() + float((probe or {}).get("initialDelaySeconds", 0))
        while True:
            try:
                return process.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self._stopping():
                return None
            if probe and time.monotonic() >= next_probe:
                next_probe = time.monotonic() + period
                now_ready = self._probe(container)
                if now_ready != ready:
                    ready = now_ready
                    self._publish("Running", self._container_status(container, running, ready=ready, restarts=restarts, last=last, container_id=container_id), ready=ready)

    def _terminate(self, process: subprocess.Popen[bytes]) -> int:
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        if self._shutdown:
            grace = min(int(grace), 2)
        log.info("Stopping container pod=%s pid=%d grace_seconds=%s", self.key, process.pid, grace)
        # A container runtime signals the container's main process, then kills the rest.
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            return process.wait(timeout=max(float(grace), 0.1))
        except subprocess.TimeoutExpired:
            kill_session(process.pid)
            return process.wait(timeout=10)

    def _await_removal(self) -> None:
        while not self._stopping():
            self._wake.wait(5)

    def _cleanup(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            kill_session(self.process.pid)
        self.ctx.pool.release(self.uid)
        shutil.rmtree(self.pod_dir, ignore_errors=True)
        if self._shutdown and not self._deleting:
            return
        if not self._gone:
            try:
                self.ctx.api.delete_pod_now(self.pod)
                log.info("Removed pod pod=%s uid=%s", self.key, self.uid)
            except Exception as exc:
                log.warning("Failed to remove pod pod=%s error=%s", self.key, exc)
