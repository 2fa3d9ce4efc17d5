"""What every command of the kubectl plugin shares: the connection and output options, the console, tables.

Used by the command modules (``reading``, ``changing``) and ``main``. The
connection options are accepted before or after the command, like kubectl's.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table as RichTable

from . import present
from .kube import Kube

F = TypeVar("F", bound=Callable[..., Any])


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # piped output is for scripts and `grep`: never wrapped to 80 columns
    return Console(file=stream, width=None if stream.isatty() else 1000, highlight=False, soft_wrap=not stream.isatty())


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _connection_params(f: F) -> F:
    f = click.option("-n", "--namespace", help="The namespace (default: the context's namespace, else default).")(f)
    f = click.option("--context", help="The kubeconfig context to use (default: the current context).")(f)
    return click.option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).")(f)


def _connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
    root = click.get_current_context().find_root().params
    return Kube.connect(kubeconfig or root.get("kubeconfig"), context or root.get("context"), namespace or root.get("namespace"))


def connection_options(f: F) -> F:
    """--kubeconfig, --context, -n: accepted before or after the command, like kubectl's; passes ``kube``."""

    @_connection_params
    @functools.wraps(f)
    def wrapper(*args: Any, kubeconfig: str | None, context: str | None, namespace: str | None, **kwargs: Any) -> Any:
        return f(*args, kube=_connect(kubeconfig, context, namespace), **kwargs)

    return wrapper  # type: ignore[return-value]


def lazy_connection_options(f: F) -> F:
    """The same options, but passes ``connect``: a command that may not need the cluster connects only when it does."""

    @_connection_params
    @functools.wraps(f)
    def wrapper(*args: Any, kubeconfig: str | None, context: str | None, namespace: str | None, **kwargs: Any) -> Any:
        return f(*args, connect=lambda: _connect(kubeconfig, context, namespace), **kwargs)

    return wrapper  # type: ignore[return-value]


def output_option(f: F) -> F:
    return click.option(
        "-o", "--output", type=click.Choice(present.FORMATS), default="table", show_default=True,
        help="table for people; json or yaml for scripts.",
    )(f)


def wait_options(f: F) -> F:
    f = click.option("--timeout", type=click.IntRange(1), help="Seconds --wait waits before giving up (exit 3).")(f)
    return click.option("--wait", is_flag=True, help="Wait until the operator has done it, showing progress.")(f)


def print_table(table: present.Table, empty: str) -> None:
    if not table.rows:
        console(stderr=True).print(empty)
        return
    out = RichTable(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in table.columns:
        out.add_column(column, no_wrap=column not in ("MESSAGE",), overflow="fold")
    for row in table.rows:
        out.add_row(*row)
    con = console()
    if con.is_terminal:
        con.print(out)
        return
    with con.capture() as captured:  # piped: no padding after the last column
        con.print(out)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def emit(value: Any, fmt: str) -> None:
    click.echo(present.dump(value, fmt))
