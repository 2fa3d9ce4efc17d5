"""Helpers of the two-replica tests: operator replicas on one Lease, a watch on their health endpoints, a partition.

Used by tests/e2e/test_two_replicas.py. Each replica is a real
``streamjob-operator`` process (streamjob_e2e.Operator) serving its health
endpoints on 127.0.0.1; the partition is a TCP proxy on 127.0.0.1 between one
replica and the test bed's API server that, once cut, drops every byte both
ways and keeps the connections open (lost packets, no reset), so calls hang
until their own timeouts, as across a real network partition.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import uuid
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from testbed import TestBed
from testbed.control_plane import AUDITED_GROUP
from testbed.pki import CertPair, client_cert
from testbed.proc import free_port
from testbed.waiting import wait_for

from streamjob_e2e import Operator

class Replica(Operator):
    """One operator process reaching the API server through its own Partition (uncut: a plain proxy)."""

    def __init__(self, testbed: TestBed, tmp_path: Path, lease: str, name: str) -> None:
        self.port = free_port()
        self.user = f"streamjob-replica-{name}-{uuid.uuid4().hex[:6]}"  # the API server's audit log names it
        self.partition = Partition(testbed, tmp_path, name, self.user)
        super().__init__(testbed, tmp_path / f"operator-{name}.log", lease,
                         ["--liveness", f"http://127.0.0.1:{self.port}/healthz"],
                         self.partition.kubeconfig)
        self.name = name

    @property
    def identity(self) -> str:
        found = re.search(r"Started leader election .* identity=(\S+)", self.log())
        assert found, f"replica {self.name} logged no identity:\n{self.log()[-2000:]}"
        return found.group(1)

    def probe(self, path: str = "/healthz") -> int | None:
        """The HTTP status of a health endpoint, None when it does not answer within 2 s."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def exit_code(self) -> int | None:
        assert self.proc is not None
        return self.proc.poll()

    def __repr__(self) -> str:
        return f"replica {self.name}"


class Replicas:
    def __init__(self, testbed: TestBed, kube_api: client.ApiClient, tmp_path: Path, lease: str) -> None:
        self.testbed = testbed
        self.leases = client.CoordinationV1Api(kube_api)
        self.tmp_path = tmp_path
        self.lease = lease
        self.all: list[Replica] = []

    def start(self, *names: str) -> list[Replica]:
        """Starts the replicas at once (each boots in its own process) and waits for their liveness endpoints."""
        started = [Replica(self.testbed, self.tmp_path, self.lease, name) for name in names]
        for replica in started:
            replica.start()
            self.all.append(replica)
        for replica in started:
            wait_for(lambda: replica.probe() == 200 and "Started leader election" in replica.log(), 90,
                     f"{replica}'s liveness endpoint")
        return started

    def live(self) -> list[Replica]:
        return [r for r in self.all if r.exit_code() is None]

    def wait_new_leader(self, old: Replica | None, timeout: float = 60) -> Replica:
        """Another live replica holds the Lease and has started kopf; returns it."""
        def found() -> Replica | None:
            holder = self.holder()
            return next((r for r in self.live() if r is not old and r.identity == holder and "Started operator" in r.log()),
                        None)

        return wait_for(found, timeout, f"a replica other than {old} to lead")

    def holder(self) -> str | None:
        try:
            holder: str | None = self.leases.read_namespaced_lease(self.lease, "default").spec.holder_identity
            return holder
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def wait_standby(self, replica: Replica) -> None:
        wait_for(lambda: "Waiting for leader lease" in replica.log(), 60, f"{replica} to stand by")
        assert self.holder() != replica.identity and "Started operator" not in replica.log()
        assert replica.probe("/readyz") == 200, f"{replica} can take over, so it is ready"

    def wait_stepped_down(self, replica: Replica, timeout: float = 60) -> str:
        """The replica exits with 1, saying why; returns its log."""
        wait_for(lambda: replica.exit_code() is not None, timeout, f"{replica} to step down")
        assert replica.exit_code() == 1, f"{replica} exited with {replica.exit_code()}"
        log = replica.log()
        assert "Stepped down from leader lease" in log, log[-3000:]
        return log

    def stop(self) -> None:
        for replica in self.all:
            if replica.proc is not None and replica.proc.poll() is None:
                replica.signal(signal.SIGCONT)
                replica.stop()
            replica.partition.close()


class HealthWatch:
    """Probes the liveness endpoint of each watched replica every half second, as a kubelet would, and keeps failures.

    A replica is watched from when it was started until the test kills, freezes or cuts it off on purpose.
    """

    def __init__(self) -> None:
        self.watched: set[Replica] = set()
        self.failures: list[str] = []
        self.probes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def watch(self, replica: Replica) -> None:
        with self._lock:
            self.watched.add(replica)

    def unwatch(self, replica: Replica) -> None:
        with self._lock:
            self.watched.discard(replica)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                replicas = list(self.watched)
            for replica in replicas:
                status = replica.probe()
                with self._lock:
                    self.probes += 1
                    if replica in self.watched and status != 200:
                        self.failures.append(f"{replica}: liveness answered {status}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Partition:
    """A TCP proxy on 127.0.0.1 to the API server; ``cut`` drops every byte both ways and keeps connections open."""

    def __init__(self, testbed: TestBed, tmp_path: Path, name: str, user: str) -> None:
        api = urllib.parse.urlsplit(testbed.api_url)  # 127.0.0.1, or the bridge's loopback alias on the real node
        self.upstream = (api.hostname or "127.0.0.1", api.port or testbed.apiserver_port)
        self.cut_off = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._writers: set[asyncio.StreamWriter] = set()
        self.server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._accept, "127.0.0.1", 0), self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        config = yaml.safe_load(testbed.kubeconfig.read_text())
        for cluster in config["clusters"]:  # the API server's certificate names 127.0.0.1: TLS passes through unchanged
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        # a cert of the replica's own: an administrator, and in the group whose every request is audited
        pki_dir = testbed.ca_file.parent
        cert = client_cert(tmp_path, CertPair(pki_dir / "ca.crt", pki_dir / "ca.key"), f"client-{name}", user,
                           ("system:masters", AUDITED_GROUP))
        for entry in config["users"]:
            entry["user"] = {"client-certificate": str(cert.cert), "client-key": str(cert.key)}
        self.kubeconfig = tmp_path / f"kubeconfig-through-proxy-{name}"
        self.kubeconfig.write_text(yaml.safe_dump(config))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if not self.cut_off:
                    writer.write(data)
                    await writer.drain()
        finally:
            if not self.cut_off:  # across a partition not even the close gets through
                writer.close()

    def cut(self) -> None:
        self.cut_off = True

    def close(self) -> None:
        async def shut() -> None:
            self.server.close()
            for writer in self._writers:
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
