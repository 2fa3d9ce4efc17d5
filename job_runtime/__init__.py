"""The StreamJob job runtime: the Python process in the driver pod that runs one Spark Structured Streaming job.

Entry points and the names users and images rely on stay at the top:

- ``main``: ``streamjob-runtime run|validate`` (also ``python -m job_runtime.main``);
- ``driver``: the primary resource for ``spark-submit`` (``/opt/streamjob/driver.py`` in the image);
- ``context``: ``JobContext``, what a Python entrypoint job receives;
- ``settings``: the ``run`` command's settings, one frozen value read by every part;
- ``testhooks``: the kill tests' pause points.

The parts, each a subpackage:

- ``run``: the driver's life (the Runner, the checks before the query starts, the
  savepoint requests, the HTTP control endpoint);
- ``query``: Spark itself (the session, building and starting the query from the job
  definition, stopping between batches, reading its errors and progress);
- ``checkpoints``: the care of the job's checkpoint location (ownership, crash recovery,
  the state-partition pin, non-restored state, storage hygiene);
- ``savepoints``: writing and restoring savepoints, the bytes' transfer, where one may
  be written, and the ``streamjob-savepoints`` command line;
- ``kafka``: the exactly-once Kafka sink, SASL settings, the source offsets watch.
"""
