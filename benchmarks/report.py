"""What every benchmark report ends with: the machine it ran on, how to reproduce it, and where it is written.

The figures in a report are only as good as the conditions they were taken in, so every
report says them the same way: the CPUs, the Python and Spark versions, when, and the load
average at the end (the machines are shared; the ratios measured side by side in one run are
what to read, not the seconds).
"""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from pathlib import Path

AFTER_BOOTSTRAP = "after `bash scripts/bootstrap.sh && source .streamjob-env`"


def machine(master: str = "local[2]") -> str:
    """One paragraph: the machine, the versions, the time and the load while the benchmark ran."""
    import pyspark

    one, _, fifteen = os.getloadavg()
    return (
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()},\n"
        f"Spark {pyspark.__version__}, `{master}`. Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"load average at the end\n{one:.1f} (1 min) / {fifteen:.1f} (15 min). The machine was shared with other "
        "work while this ran:\nread the ratios measured side by side, not the seconds."
    )


def reproduce(command: str, setup: str = AFTER_BOOTSTRAP) -> str:
    """The command that produced the report, as an indented block."""
    return f"Reproduce ({setup}):\n\n    {command}\n"


def publish(path: Path, text: str) -> None:
    """Write the report (its folder created) and print it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
