"""What went wrong, in words a user can act on: an API server, S3 or driver error as a ``Problem``.

Called by ``reconcile.observe`` (what could not be read) and ``k8s.act`` (what
could not be done), whose problems the kopf glue puts into status
(``status.reconcileError`` and the Degraded condition) and into an event. The
messages carry the API server's or S3's own words, which name objects and
fields but never credentials.
"""

from __future__ import annotations

import json

from kubernetes.client.rest import ApiException

from streamjob_operator.reconcile.model import Problem

_MESSAGE_LIMIT = 600


def _api_message(err: ApiException) -> str:
    try:
        body = json.loads(err.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return str(err.reason or f"HTTP {err.status}")


def api_reason(err: ApiException, message: str) -> str:
    """A CamelCase reason from the API server's answer: quota, admission, RBAC, validation, conflict..."""
    text = message.lower()
    if err.status == 403 and "exceeded quota" in text:
        return "QuotaExceeded"
    if "admission" in text or "denied the request" in text or "violates podsecurity" in text:
        return "AdmissionDenied"
    if err.status == 403:
        return "Forbidden"
    if err.status in (400, 422):
        return "Invalid"
    if err.status == 404:
        return "NotFound"
    if err.status == 409:
        return "Conflict"
    if err.status == 429 or (err.status or 0) >= 500:
        return "ApiServerUnavailable"
    return "ApiError"


def describe_error(err: BaseException, doing: str, reason: str | None = None) -> Problem:
    """``doing`` says what the operator was doing, e.g. "creating driver pod wc-driver-2"."""
    if isinstance(err, ApiException):
        message = _api_message(err)
        return Problem(reason or api_reason(err, message), f"{doing}: {message}"[:_MESSAGE_LIMIT])
    kind = type(err).__name__
    module = type(err).__module__ or ""
    if module.startswith(("botocore", "boto3", "s3transfer")) or "S3" in kind:
        return Problem(reason or "S3Error", f"{doing}: {err}"[:_MESSAGE_LIMIT])
    return Problem(reason or "ReconcileError", f"{doing}: {kind}: {err}"[:_MESSAGE_LIMIT])
