"""``kubectl streamjob``: the kubectl plugin for StreamJobs (the ``kubectl-streamjob`` console script).

Commands read StreamJobs and their events, and change only what the operator
already understands: ``spec.savepointNonce``, ``spec.restartNonce`` and
``spec.state``. The plugin never calls the driver; it reads S3 (``inspect``,
``history --sizes``) and never writes there.

Exit codes: 0 done; 1 error (job not found, API or S3 failure, no driver pod);
2 bad usage; 3 a ``--wait`` that ended in failure or timed out; 4 ``inspect``
refused the savepoint (the message names the file and the rule).
"""

from __future__ import annotations

import click

from . import changing, reading
from .changing import WaitFailed
from .kube import CliError
from .options import console
from .reading import SavepointRefused

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_WAIT_FAILED = 3
EXIT_SAVEPOINT_INVALID = 4


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).")
@click.option("--context", help="The kubeconfig context to use.")
@click.option("-n", "--namespace", help="The namespace (default: the context's namespace, else default).")
def cli(kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
    """Operate StreamJobs: list them, read their status and history, take savepoints,
    suspend, resume and restart them, read the driver's log and inspect savepoints.

    Exit codes: 0 done, 1 error, 2 bad usage, 3 a --wait that failed or timed out,
    4 inspect refused the savepoint.
    """


for command in (reading.list_jobs, reading.status, reading.history, reading.logs, reading.inspect,
                changing.savepoint, changing.suspend, changing.resume, changing.restart):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    err = console(stderr=True)
    try:
        result = cli.main(args=argv, prog_name="kubectl streamjob", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        exc.show()
        return EXIT_USAGE
    except click.exceptions.Abort:
        err.print("aborted", markup=False)
        return EXIT_ERROR
    except click.ClickException as exc:
        exc.show()
        return EXIT_ERROR
    except CliError as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_ERROR
    except WaitFailed as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_WAIT_FAILED
    except SavepointRefused as exc:
        err.print(f"error: savepoint refused: {exc}", markup=False)
        return EXIT_SAVEPOINT_INVALID
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # the API server, S3 or the network: a message, not a traceback
        err.print(f"error: {_describe(exc)}", markup=False)
        return EXIT_ERROR
    return result if isinstance(result, int) else EXIT_OK


def _describe(exc: Exception) -> str:
    import urllib3

    if isinstance(exc, urllib3.exceptions.HTTPError):
        return f"cannot reach the API server: {exc}"
    if type(exc).__module__.startswith(("botocore", "boto3")):
        hint = " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give --job NAME)" if type(exc).__name__ == "NoCredentialsError" else ""
        return f"S3: {exc}{hint}"
    return f"{type(exc).__name__}: {exc}"
