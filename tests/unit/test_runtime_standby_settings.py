"""The runtime's --standby option: what it may be combined with (job_runtime.settings.validate)."""

from __future__ import annotations

import pytest

from job_runtime.main import build_parser, settings_from_args
from job_runtime.settings import SettingsError

BASE = ["run", "--job", "job.json", "--name", "wc", "--namespace", "ns", "--checkpoint", "s3a://b/ck/run-2",
        "--state-partitions", "2", "--token-file", "token"]


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        pytest.param(["--standby"], None, id="a standby with the control endpoint"),
        pytest.param(["--standby", "--restore-from", "s3://b/sp/x"], "--standby: the savepoint to restore comes with the release",
                     id="the savepoint comes with the release, not on the command line"),
        pytest.param(["--standby", "--control-address", ""], "--standby: needs the control endpoint",
                     id="no control endpoint, no release"),
    ],
)
def test_standby_options(extra: list[str], refusal: str | None) -> None:
    args = build_parser().parse_args([*BASE, *extra])
    if refusal is None:
        assert settings_from_args(args, "hash").standby is True
        return
    with pytest.raises(SettingsError, match=refusal):
        settings_from_args(args, "hash")
