"""Turns a job definition into a started StreamingQuery.

Called by job_runtime.run.runner at each start of the query (the first start, and
the restart after a stop-with-savepoint whose savepoint failed). Knows the two
kinds of job: a Python entrypoint `package.module:function` and a declarative
pipeline (job_runtime.query.pipeline).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from job_runtime.context import JobContext
from streamjob_contract.jobdef import JobDefinition, JobDefinitionError
from job_runtime.query.pipeline import _analysis_errors, _first_line, build_pipeline
from job_runtime.settings import RuntimeSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from job_runtime.checkpoints.epoch import Fence
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("job_runtime.jobs")

Entrypoint = Callable[[JobContext], Any]


def load_entrypoint(job: JobDefinition) -> Entrypoint:
    """Import `package.module:function`; raises JobDefinitionError naming job.entrypoint."""
    assert job.entrypoint is not None
    for path in job.python_path:
        if path not in sys.path:
            sys.path.insert(0, path)
    module_name, _, function_name = job.entrypoint.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise JobDefinitionError(f"job.entrypoint {job.entrypoint!r}: cannot import module {module_name!r}: {err}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise JobDefinitionError(f"job.entrypoint {job.entrypoint!r}: module {module_name!r} has no function {function_name!r}")
    entrypoint: Callable[[JobContext], Any] = function
    return entrypoint


def make_context(
    spark: "SparkSession", job: JobDefinition, settings: RuntimeSettings, once: bool = False,
    fence: "Fence | None" = None, restored: bool = False,
) -> JobContext:
    return JobContext(
        spark=spark,
        config=dict(job.config),
        job_name=settings.name,
        job_namespace=settings.namespace,
        checkpoint_location=settings.checkpoint_location,
        trigger_interval=settings.trigger_interval,
        available_now=settings.available_now,
        state_partitions=settings.state_partitions,
        query_name=query_name(settings),
        sources={s.name: s for s in job.sources or []},
        declared_sink=job.sink,
        once=once,
        fence=fence,
        restored=restored,
    )


def query_name(settings: RuntimeSettings) -> str:
    # Spark query names must be unique per session and show in the UI and logs.
    return f"{settings.namespace}_{settings.name}".replace("-", "_")


def check_job(spark: "SparkSession", job: JobDefinition, settings: RuntimeSettings) -> None:
    """A warm standby's check before it reports STANDBY: what can be built without starting the query.

    A pipeline's sources, transforms and sink writer are built and analysed (no source is read, no sink
    written, no checkpoint touched); an entrypoint is imported, not called, because calling it may start
    the query. Raises JobDefinitionError naming the field, as a start would."""
    if job.pipeline is not None:
        context = make_context(spark, job, settings)
        try:
            build_pipeline(spark, job.pipeline, identity=context.sink_identity())
        except _analysis_errors() as err:
            raise JobDefinitionError(f"job.pipeline: the query cannot start: {_first_line(err)}") from None
        return
    load_entrypoint(job)


def start_query(
    spark: "SparkSession", job: JobDefinition, settings: RuntimeSettings, once: bool = False,
    fence: "Fence | None" = None, restored: bool = False,
) -> "StreamingQuery":
    """Build the job's query and start it with the runtime's checkpoint, trigger and name
    (`once`: a one-batch trigger, for the batch a stop left planned; job_runtime.query.drain;
    `fence`: this driver's epoch, which the sinks check; `restored`: this start restored a savepoint)."""
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    context = make_context(spark, job, settings, once, fence, restored)
    if job.pipeline is not None:
        writer = build_pipeline(spark, job.pipeline, identity=context.sink_identity())
        try:
            return context.start(writer)
        except _analysis_errors() as err:
            raise JobDefinitionError(f"job.pipeline: the query cannot start: {_first_line(err)}") from None
    entrypoint = load_entrypoint(job)
    result = entrypoint(context)
    if isinstance(result, DataStreamWriter):
        try:
            return context.start(result)
        except _analysis_errors() as err:
            raise JobDefinitionError(f"job.entrypoint {job.entrypoint!r}: the query cannot start: {_first_line(err)}") from None
    if isinstance(result, StreamingQuery):
        return result
    raise JobDefinitionError(
        f"job.entrypoint {job.entrypoint!r}: returned {type(result).__name__}, expected a DataStreamWriter or a started StreamingQuery"
    )
