"""Load generator: answers the runtime's control API for simulated driver pods, from a fixture. Not a driver.

Started by ``benchmarks/operator_scale.py`` as one process (``python benchmarks/loadgen.py ...``).
Thousands of driver JVMs do not fit on the benchmark's machine, so the StreamJobs under load get
driver pods on a kwok node (simulated: no process runs for them) whose pod addresses are on
loopback; this one asyncio process listens on each such pod's address at the control port and
answers what the operator asks a driver (``GET /status``, as ``streamjob_contract.runtime_status``
types it) from a fixture: STARTING for ``--start-seconds``, then RUNNING with a batch id that
advances every ``--batch-seconds``. Everything else (savepoints, /stop, /release) is answered 404:
the benchmark's jobs use ``upgradeMode: last-state`` without savepoints.

It watches the driver pods of ``--node`` to know which address is which job's, and checks the
bearer token against the job's token Secret as the runtime does (401 otherwise); tokens are
never logged. ``GET /stats`` on ``--stats`` (host:port) reports what it served, for the benchmark:
per job, the calls and the monotonic time of the last one.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hmac
import json
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config, watch

from streamjob_contract.runtime_status import RunState, RuntimeStatus
from streamjob_operator.reconcile import names

log = logging.getLogger("loadgen")
TOKEN_KEY = "token"


@dataclass
class SimulatedDriver:
    """One simulated pod: its job, its address, when it started answering."""

    namespace: str
    job: str
    pod: str
    ip: str
    started: float = field(default_factory=time.monotonic)
    server: asyncio.base_events.Server | None = None
    calls: int = 0
    last_call: float | None = None

    def status(self, start_seconds: float, batch_seconds: float) -> dict[str, Any]:
        age = time.monotonic() - self.started
        if age < start_seconds:
            return RuntimeStatus(job=self.job, state=RunState.STARTING).to_json()
        batch = int((age - start_seconds) // batch_seconds)
        return RuntimeStatus(
            job=self.job, state=RunState.RUNNING, query_id=f"loadgen-{self.pod}", run_id=f"loadgen-{self.pod}",
            query_starts=1, latest_completed_batch=batch, last_batch_id=batch, trigger_active=False,
            status_message="Waiting for next trigger (load generator fixture)", num_input_rows=10,
            input_rows_per_second=1.0, processed_rows_per_second=1.0, batch_duration_ms=50,
            spark_version="loadgen",
        ).to_json()


class LoadGenerator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.loop = asyncio.new_event_loop()
        self.api = config.new_client_from_config(config_file=args.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.drivers: dict[str, SimulatedDriver] = {}  # by pod uid
        self.by_ip: dict[str, SimulatedDriver] = {}
        self.tokens: dict[tuple[str, str], str] = {}
        self.unauthorized = 0
        self.stopping = threading.Event()

    # --- which address is which job's: the pods of the kwok node ---------------------------------
    def watch_pods(self) -> None:
        selector = f"{names.LABEL_ROLE}={names.ROLE_DRIVER}"
        fields = f"spec.nodeName={self.args.node}"
        while not self.stopping.is_set():
            try:
                listing = self.core.list_pod_for_all_namespaces(label_selector=selector, field_selector=fields)
                seen = set()
                for pod in listing.items:
                    seen.add(pod.metadata.uid)
                    self.loop.call_soon_threadsafe(self.pod_seen, pod)
                for uid in [u for u in list(self.drivers) if u not in seen]:
                    self.loop.call_soon_threadsafe(self.pod_gone, uid)
                w = watch.Watch()
                for event in w.stream(self.core.list_pod_for_all_namespaces, label_selector=selector, field_selector=fields,
                                      resource_version=listing.metadata.resource_version, timeout_seconds=60):
                    if self.stopping.is_set():
                        w.stop()
                        return
                    pod = event["object"]
                    if event["type"] == "DELETED":
                        self.loop.call_soon_threadsafe(self.pod_gone, pod.metadata.uid)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self.loop.call_soon_threadsafe(self.pod_seen, pod)
            except Exception as exc:  # a dropped watch: list again
                if not self.stopping.is_set():
                    log.warning("Restarted pod watch error=%s", exc)
                    time.sleep(1)

    def pod_seen(self, pod: Any) -> None:
        uid, ip = pod.metadata.uid, pod.status.pod_ip if pod.status else None
        if uid in self.drivers or not ip or pod.metadata.deletion_timestamp or (pod.status.phase != "Running"):
            if uid in self.drivers and pod.metadata.deletion_timestamp:
                self.pod_gone(uid)  # a deleted driver stops answering at once, as one sent SIGTERM would
            return
        job = (pod.metadata.labels or {}).get(names.LABEL_JOB)
        if not job:
            return
        previous = self.by_ip.get(ip)
        if previous is not None:  # kwok gave a deleted pod's address to this one before its deletion reached us
            self.pod_gone(next((u for u, d in self.drivers.items() if d is previous), ""))
        driver = SimulatedDriver(pod.metadata.namespace, job, pod.metadata.name, ip)
        self.drivers[uid] = driver
        self.by_ip[ip] = driver
        self.loop.create_task(self.listen(driver))

    def pod_gone(self, uid: str) -> None:
        driver = self.drivers.pop(uid, None)
        if driver is None:
            return
        if self.by_ip.get(driver.ip) is driver:
            del self.by_ip[driver.ip]
        if driver.server is not None:
            driver.server.close()

    async def listen(self, driver: SimulatedDriver) -> None:
        for attempt in range(20):  # the address's previous listener may still be closing
            try:
                driver.server = await asyncio.start_server(lambda r, w: self.serve(driver, r, w), driver.ip,
                                                           self.args.port, reuse_address=True, backlog=64)
                break
            except OSError as exc:
                if attempt == 19:
                    log.warning("Could not listen pod=%s/%s address=%s:%d error=%s", driver.namespace, driver.pod,
                                driver.ip, self.args.port, exc)
                    return
                await asyncio.sleep(0.5)
        assert driver.server is not None
        if driver.ip not in self.by_ip:  # gone while binding
            driver.server.close()

    # --- the control API -----------------------------------------------------------------------
    async def token(self, namespace: str, job: str) -> str | None:
        key = (namespace, job)
        if key not in self.tokens:
            def read() -> str | None:
                try:
                    secret = self.core.read_namespaced_secret(names.token_secret(job), namespace)
                except client.ApiException:
                    return None
                return base64.b64decode((secret.data or {}).get(TOKEN_KEY, "")).decode()
            found = await self.loop.run_in_executor(None, read)
            if found is None:
                return None
            self.tokens[key] = found
        return self.tokens[key]

    async def serve(self, driver: SimulatedDriver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            if int(headers.get("content-length") or 0):
                await reader.readexactly(int(headers["content-length"]))
            driver.calls += 1
            driver.last_call = time.monotonic()
            given = headers.get("authorization", "").removeprefix("Bearer ")
            expected = await self.token(driver.namespace, driver.job)
            if expected is None or not hmac.compare_digest(given.encode(), expected.encode()):
                self.tokens.pop((driver.namespace, driver.job), None)  # a Secret replaced since it was read: read again
                expected = await self.token(driver.namespace, driver.job)
            if expected is None or not hmac.compare_digest(given.encode(), expected.encode()):
                self.unauthorized += 1
                code, body = 401, {"error": "unauthorized"}
            elif method == "GET" and path.split("?", 1)[0] == "/status":
                code, body = 200, driver.status(self.args.start_seconds, self.args.batch_seconds)
            else:
                code, body = 404, {"error": f"{method} {path}: not served by the load generator"}
            await self.reply(writer, code, body)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def reply(writer: asyncio.StreamWriter, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found"}.get(code, "")
        writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + data)
        await writer.drain()

    async def serve_stats(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            now = time.monotonic()
            body = {
                "now": now, "pods": len(self.drivers), "unauthorized": self.unauthorized,
                "calls": sum(d.calls for d in self.drivers.values()),
                "jobs": {f"{d.namespace}/{d.job}": {"pod": d.pod, "calls": d.calls, "last_call": d.last_call,
                                                   "listening": d.server is not None}
                         for d in self.drivers.values()},
            }
            await self.reply(writer, 200, body)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        host, _, port = self.args.stats.rpartition(":")
        self.loop.run_until_complete(asyncio.start_server(self.serve_stats, host, int(port)))
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.loop.stop)
        threading.Thread(target=self.watch_pods, name="pod-watch", daemon=True).start()
        log.info("Started load generator node=%s port=%d stats=%s", self.args.node, self.args.port, self.args.stats)
        try:
            self.loop.run_forever()
        finally:
            self.stopping.set()
            log.info("Stopped load generator pods=%d", len(self.drivers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", required=True, help="the kwok node whose driver pods this answers for")
    parser.add_argument("--port", type=int, default=8765, help="the runtime's control port")
    parser.add_argument("--stats", default="127.0.0.1:0", help="host:port of GET /stats")
    parser.add_argument("--start-seconds", type=float, default=2.0, help="STARTING before RUNNING")
    parser.add_argument("--batch-seconds", type=float, default=5.0, help="between batch ids")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    LoadGenerator(args).run()


if __name__ == "__main__":
    main()
