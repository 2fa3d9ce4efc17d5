"""The primary resource spark-submit runs: `spark-submit [options] job_runtime/driver.py run ...`.

Called by spark-submit in the driver pod (the operator renders the command);
it only makes sure the job_runtime package is importable and hands the
arguments to job_runtime.main. The exit code passes through spark-submit
(SparkSubmit exits with the Python process's code).

SIGTERM under spark-submit reaches the JVM (the container's PID 1) first, and
the JVM's shutdown hooks stop Spark before Python can stop the query cleanly;
to keep "SIGTERM exits 11" the operator stops a job through POST /stop (or
stop-with-savepoint) before deleting its pod, or runs `streamjob-runtime run`
as the container command (Python is then PID 1 and the JVM its child).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # spark-submit puts this file's folder (job_runtime/) first on sys.path; the
    # package itself must come from its parent (or from the installed wheel).
    here = Path(__file__).resolve().parent
    if sys.path and Path(sys.path[0]).resolve() == here:
        sys.path.pop(0)
    try:
        import job_runtime  # noqa: F401
    except ImportError:
        sys.path.append(str(here.parent))  # appended: the repo has an operator/ folder that must not shadow the stdlib module

    from job_runtime.main import main

    main(sys.argv[1:])
