"""Connections to the outside world: the Kubernetes API, the driver's control endpoint, S3.

Called by ``reconcile.observe`` (reads) and ``k8s.act`` (writes); nothing
else opens a connection. Secrets read here (the job's control token, the
S3 credentials) live only in memory and never reach logs, events or status.

S3 is a tenant's endpoint, reached from the shared handler threads: every call
has short timeouts and bounded retries (``S3Limits``, operator settings), goes
through ``s3_call``, which skips an endpoint that just timed out for a while
instead of waiting on it again, and is unsigned unless the spec references
credentials or the chart lends the operator's own identity (``ambient_credentials``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.util.retry import Retry

from streamjob_contract.s3 import S3Config
from streamjob_operator.api.spec import API_GROUP, API_VERSION, PLURAL, StreamJobSpec
from streamjob_operator.k8s.cache import ReadCache
from streamjob_operator.k8s.resources import TOKEN_KEY, RuntimeLayout
from streamjob_operator.reconcile import names

log = logging.getLogger(__name__)

HTTP_TIMEOUT_SECONDS = 3.0
T = TypeVar("T")


@dataclass(frozen=True)
class S3Limits:
    """How long the operator waits on a job's S3 endpoint (operator settings, docs/operator-settings.md)."""

    connect_timeout_seconds: float = 3.0
    read_timeout_seconds: float = 10.0
    max_attempts: int = 2  # botocore's count: the first try and one retry
    unresponsive_seconds: float = 60.0  # an endpoint that timed out is not called again for this long
    ambient_credentials: bool = False  # lend the operator's own identity to jobs without credentialsSecret

    def worst_case_seconds(self) -> float:
        """The longest one S3 request may wait on the endpoint: every attempt times out, plus botocore's
        "standard" backoff between attempts (at most 2**i s before retry i)."""
        backoff = sum(min(2.0**i, 20.0) for i in range(1, self.max_attempts))
        return self.max_attempts * (self.connect_timeout_seconds + self.read_timeout_seconds) + backoff


class S3Unresponsive(Exception):
    """An S3 endpoint timed out recently: the call was not made."""


class DriverUnreachable(Exception):
    """The control endpoint did not answer (connection refused, timeout, 5xx)."""


@dataclass(frozen=True)
class DriverReply:
    status: int
    body: dict[str, Any]


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CALL_TIMEOUT_SECONDS = 30.0  # any API call without a timeout of its own: no handler thread waits forever on a partition


def load_api_client(fence: Callable[[], None] | None = None,
                    write_timeout: Callable[[], float | None] = lambda: None,
                    pool_size: int | None = None) -> client.ApiClient:
    """In-cluster config when running in a pod, else $KUBECONFIG / ~/.kube/config.

    Every call without a ``_request_timeout`` of its own gets one: ``write_timeout()`` for writes when
    it is set (under leader election, the Lease margin: a write sent before the deadline ends before a
    standby may take over), else ``CALL_TIMEOUT_SECONDS``. With ``fence``, every write (POST, PUT, PATCH,
    DELETE) calls it first, in the transport, right before the request leaves: a replica frozen in the
    middle of a pass and thawed past its Lease deadline steps down at its next write, whichever call
    of the pass that is.

    ``pool_size``: connections kept open to the API server, at least one per thread that calls it (the
    handler workers). The client's default is 5 per CPU; with fewer than the workers, every request over
    it opened a connection (a TLS handshake) and dropped it ("Connection pool is full"), at scale on most
    requests."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
    if pool_size is not None:
        configuration.connection_pool_maxsize = max(pool_size, configuration.connection_pool_maxsize or 0)
    api = client.ApiClient(configuration=configuration)
    guard_calls(api, fence, write_timeout)
    return api


def guard_calls(api: client.ApiClient, fence: Callable[[], None] | None,
                write_timeout: Callable[[], float | None] = lambda: None) -> None:
    """Puts the fence and the default timeouts of ``load_api_client`` into ``api``'s transport.

    The fence runs right before urllib3 sends a write, and again before each of urllib3's retries of it
    (``FencedRetry``): a write retried after a reset connection is a write sent later."""
    rest = api.rest_client
    send, pool_send = rest.request, rest.pool_manager.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            write = method.upper() in WRITE_METHODS
            kwargs["_request_timeout"] = (write_timeout() if write else None) or CALL_TIMEOUT_SECONDS
        return send(method, url, *args, **kwargs)

    def pool_request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if fence is not None and method.upper() in WRITE_METHODS:
            fence()
            kwargs["retries"] = FencedRetry(total=Retry.DEFAULT.total, fence=fence)
        return pool_send(method, url, *args, **kwargs)

    rest.request = request
    rest.pool_manager.request = pool_request


def fence_kopf_writes(fence: Callable[[], None]) -> Callable[[], None]:
    """kopf's own writes (its finalizer, its annotations, event posts) go through aiohttp, not through ``api``:
    the same fence runs before each one leaves. Process-wide (kopf makes its sessions itself); returns the undo."""
    import aiohttp

    send = aiohttp.ClientSession._request

    async def request(self: aiohttp.ClientSession, method: str, str_or_url: Any, **kwargs: Any) -> Any:
        if method.upper() in WRITE_METHODS:
            fence()
        return await send(self, method, str_or_url, **kwargs)

    setattr(aiohttp.ClientSession, "_request", request)
    return lambda: setattr(aiohttp.ClientSession, "_request", send)


class FencedRetry(Retry):
    """urllib3's retries (the default count), with the fence before each retry is sent."""

    def __init__(self, *args: Any, fence: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fence = fence

    def new(self, **kw: Any) -> FencedRetry:
        made = super().new(**kw)
        made.fence = self.fence
        return made

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, _pool: Any = None, _stacktrace: Any = None) -> FencedRetry:
        if self.fence is not None:
            self.fence()
        made = super().increment(method, url, response, error, _pool, _stacktrace)
        assert isinstance(made, FencedRetry)  # new() keeps the class
        return made


def decode(response: Any) -> Any:
    """JSON of a ``_preload_content=False`` response (plain dicts are easier to read than models)."""
    return json.loads(response.data)


@dataclass
class Clients:
    api: client.ApiClient
    layout: RuntimeLayout = field(default_factory=RuntimeLayout)
    s3_limits: S3Limits = field(default_factory=S3Limits)
    _tokens: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    _s3_down: dict[str, float] = field(default_factory=dict, repr=False)  # endpoint -> monotonic time it may be called again
    _s3_guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    cache: ReadCache = field(default_factory=ReadCache, repr=False)
    fence: Callable[[], None] = field(default=lambda: None, repr=False)  # before every POST to a driver (as in the API client)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    # --- the StreamJob ---------------------------------------------------------------------
    def get_streamjob(self, namespace: str, name: str, fresh: bool = False) -> dict[str, Any] | None:
        """The job's newest body the watch delivered (``cache``), else (or when ``fresh``) a GET."""
        if not fresh:
            cached = self.cache.job(namespace, name)
            if cached is not None:
                return cached
        try:
            body: dict[str, Any] = decode(
                self.custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, name, _preload_content=False))
        except ApiException as err:
            if err.status == 404:
                self.cache.forget_job(namespace, name)
                return None
            raise
        self.cache.saw_job(body)
        return body

    def driver_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The job's driver pods: from the watch once listed (``cache``), else a LIST."""
        cached = self.cache.pods(namespace, job)
        if cached is not None:
            return cached
        listing = decode(self.core.list_namespaced_pod(namespace, label_selector=names.driver_selector(job), _preload_content=False))
        items = list(listing["items"])
        self.cache.listed(namespace, job, items, (listing.get("metadata") or {}).get("resourceVersion"))
        return items

    # --- the driver's control endpoint --------------------------------------------------------
    def token(self, namespace: str, job: str) -> str | None:
        key = (namespace, job)
        if key not in self._tokens:
            try:
                secret = decode(self.core.read_namespaced_secret(names.token_secret(job), namespace, _preload_content=False))
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
            import base64

            self._tokens[key] = base64.b64decode(secret["data"][TOKEN_KEY]).decode()
        return self._tokens[key]

    def forget_token(self, namespace: str, job: str) -> None:
        self._tokens.pop((namespace, job), None)

    def driver_call(self, pod_ip: str, namespace: str, job: str, method: str, path: str, body: dict[str, Any] | None = None) -> DriverReply:
        token = self.token(namespace, job)
        if token is None:
            raise DriverUnreachable(f"no token Secret {names.token_secret(job)}")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://{pod_ip}:{self.layout.control_port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        if method != "GET":
            self.fence()
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
                return DriverReply(response.status, json.loads(response.read() or b"{}"))
        except urllib.error.HTTPError as err:
            if err.code == 401:
                self.forget_token(namespace, job)
            if err.code >= 500:
                raise DriverUnreachable(f"{method} {path}: HTTP {err.code}") from None
            try:
                payload = json.loads(err.read() or b"{}")
            except ValueError:
                payload = {}
            return DriverReply(err.code, payload)
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise DriverUnreachable(f"{method} {path}: {err}") from None

    # --- S3, with the credentials the spec references ------------------------------------------
    def s3_config(self, namespace: str, spec: StreamJobSpec) -> S3Config:
        """The job's S3 access: its Secret's keys; without one, unsigned requests unless the chart opted in."""
        s3 = spec.s3
        limits = self.s3_limits
        access = secret_key = None
        if s3 is not None and s3.credentials_secret is not None:
            ref = s3.credentials_secret
            import base64

            data = decode(self.core.read_namespaced_secret(ref.name, namespace, _preload_content=False)).get("data") or {}
            access = base64.b64decode(data.get(ref.access_key_id_key, "")).decode() or None
            secret_key = base64.b64decode(data.get(ref.secret_access_key_key, "")).decode() or None
        borrowed = s3 is None or s3.credentials_secret is None
        return S3Config(
            endpoint_url=s3.endpoint if s3 is not None else None,
            region=s3.region if s3 is not None else None,
            path_style=s3.path_style_access if s3 is not None else True,
            access_key_id=access,
            secret_access_key=secret_key,
            max_attempts=limits.max_attempts - 1,  # botocore's retries: attempts after the first
            connect_timeout=limits.connect_timeout_seconds,
            read_timeout=limits.read_timeout_seconds,
            anonymous=borrowed and not limits.ambient_credentials,
        )

    def s3_call(self, config: S3Config, call: Callable[[], T]) -> T:
        """Runs one S3 operation against ``config``'s endpoint, unless that endpoint timed out recently."""
        from botocore.exceptions import ConnectionError as BotoConnectionError  # type: ignore[import-untyped]
        from botocore.exceptions import HTTPClientError  # read timeouts, connections closed mid-answer

        endpoint = config.endpoint_url or f"AWS S3 in {config.region or 'us-east-1'}"
        limits = self.s3_limits
        with self._s3_guard:
            now, until = time.monotonic(), self._s3_down.get(endpoint)
            if until is not None and now < until:
                raise S3Unresponsive(
                    f"S3 endpoint {endpoint} did not answer within {limits.worst_case_seconds():g}s on an earlier call; "
                    f"not called again before {limits.unresponsive_seconds:g}s have passed, then by one call at a time")
            # an endpoint that timed out before is tried again by this call alone: the other passes that want it skip it
            # until this one is answered or times out, so it costs one bounded wait, not one per job on that endpoint
            probing = until is not None
            if probing:
                self._s3_down[endpoint] = now + limits.worst_case_seconds()
        answered = True
        try:
            return call()
        except (BotoConnectionError, HTTPClientError):  # timeouts, refused, DNS: the endpoint is not answering
            answered = False
            with self._s3_guard:
                self._s3_down[endpoint] = time.monotonic() + limits.unresponsive_seconds
            log.warning("S3 endpoint did not answer endpoint=%s unresponsiveSeconds=%g", endpoint, limits.unresponsive_seconds)
            raise
        finally:
            if probing and answered:  # an answer, even an S3 error: the endpoint is back
                with self._s3_guard:
                    self._s3_down.pop(endpoint, None)
