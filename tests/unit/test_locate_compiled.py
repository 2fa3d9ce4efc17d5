"""A cold machine's first run starts the tests before helm, Prometheus and the GitOps runners are compiled
(scripts/build-compiled.sh holds ``$STREAMJOB_CACHE/.compile.lock`` until they are): the tests that use them
wait for the lock, then find the binary or get an error that names it."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from testbed import locate


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAMJOB_CACHE", str(tmp_path))
    monkeypatch.setenv("STREAMJOB_BIN_DIR", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    for name in locate.BINARIES:
        (tmp_path / "bin" / name).write_text("#!/bin/sh\n")
        (tmp_path / "bin" / name).chmod(0o755)
    return tmp_path


def hold_compile_lock(cache: Path):  # the build script's lock, as flock(1) takes it
    handle = (cache / ".compile.lock").open("w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def test_helm_is_waited_for_while_the_compilation_runs(cache: Path) -> None:
    handle = hold_compile_lock(cache)
    helm = cache / "bin" / "helm"

    def finish_the_build() -> None:
        time.sleep(0.5)
        helm.write_text("#!/bin/sh\n")
        helm.chmod(0o755)
        handle.close()  # the script exits: its lock goes with it

    threading.Thread(target=finish_the_build).start()
    assert locate.helm() == helm


def test_a_tool_built_before_the_compilation_ends_is_not_waited_for_further(cache: Path) -> None:
    handle = hold_compile_lock(cache)  # held to the end of the test: Prometheus would still be compiling
    try:
        helm = cache / "bin" / "helm"
        threading.Timer(0.3, lambda: (helm.write_text("#!/bin/sh\n"), helm.chmod(0o755))).start()
        assert locate.helm() == helm
    finally:
        handle.close()


def test_a_tool_the_compilation_did_not_make_is_named(cache: Path) -> None:
    with pytest.raises(locate.MissingToolError, match=r"bin/helm is missing"):
        locate.helm()  # no lock file at all: nothing is compiling


def test_a_compilation_that_outlasts_the_wait_says_where_its_log_is(cache: Path) -> None:
    handle = hold_compile_lock(cache)
    try:
        with pytest.raises(locate.MissingToolError, match=r"still compiling after 1 s .*build-compiled"):
            locate.await_compiled(timeout=1.0)
    finally:
        handle.close()
    locate.await_compiled(timeout=1.0)  # released: returns at once
    assert not os.access(cache / "bin" / "helm", os.X_OK)
