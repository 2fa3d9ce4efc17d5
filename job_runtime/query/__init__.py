"""Spark itself: the session (``session``), the query built and started from the job
definition (``start``, ``pipeline``), the stop between micro-batches (``drain``), and what
the query's errors and progress reports say (``errors``, ``progress``, both pure).
Called by job_runtime.run."""
