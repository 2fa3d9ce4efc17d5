"""The image table: which local command a container image stands for.

Called by ``testbed.kubelet.worker`` to turn a container's image, command and
args into an argv and the image's default environment, with Docker's rules
(``command`` replaces the entrypoint, ``args`` replace the default command).

- ``*/streamjob-runtime:*`` (and ``*/streamjob-operator:*``) is our runtime image, laid out like Apache Spark's
  official image: ``/opt/spark/...`` is this environment's pyspark (SPARK_HOME),
  ``python``/``streamjob-runtime`` come from this virtualenv, the s3a jars from
  ``STREAMJOB_JARS_DIR`` are on Spark's classpath (SPARK_DIST_CLASSPATH), and
  with no command its entrypoint does what Spark's ``entrypoint.sh`` does
  (``executor`` starts KubernetesExecutorBackend as a local JVM, ``driver``
  runs spark-submit in client mode, anything else passes through).
- ``busybox``, ``alpine``, ``debian``, ``ubuntu``: the host's ``/bin/sh`` tools.
- ``python:*``: this virtualenv's Python.

An image built here by scripts/build-images.sh (``testbed.imagestore``) comes
before the table: ``resolve`` returns it with its root filesystem, and the
container runs inside it (``testbed.kubelet.podinit``) with the image's own
entrypoint, environment, user and working directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed import imagestore

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUNTIME_REPOSITORY_SUFFIX = "streamjob-runtime"
OPERATOR_REPOSITORY_SUFFIX = "streamjob-operator"  # when not built here: the same virtualenv
SPARK_IMAGE_HOME = "/opt/spark"
# Where the top-level Dockerfile puts the StreamJob runtime's files in the image.
STREAMJOB_IMAGE_HOME = "/opt/streamjob"


class ImageNotFound(Exception):
    """No entry in the table for this image; the pod waits in ErrImagePull as in a cluster."""


@dataclass(frozen=True)
class Environment:
    """Where this machine keeps what the images are made of."""

    venv_bin: Path
    spark_home: Path
    jars_dir: Path | None
    java_home: Path | None = None


@dataclass(frozen=True)
class Image:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    spark: Environment | None = None
    root: Path | None = None  # an image built here: its unpacked root filesystem
    user: str = ""
    working_dir: str = ""
    image_id: str = ""

    def container_env(self, pod_env: Mapping[str, str], pod_ip: str | None = None) -> dict[str, str]:
        """The image's ENV overridden by the container's env, as a container runtime merges them."""
        env = {**self.env, **pod_env}
        if self.root is not None and "SPARK_HOME" in self.env and pod_ip:
            # as below: the host name is the machine's, not the pod's
            env.setdefault("SPARK_LOCAL_IP", pod_ip)
        if self.spark is not None:
            if "SPARK_HOME" in env:
                env["SPARK_HOME"] = map_spark_path(env["SPARK_HOME"], self.spark)
            if pod_ip:
                # In a pod the host name resolves to the pod IP, which Spark then
                # binds to; here the host name is the machine's, so say it.
                env.setdefault("SPARK_LOCAL_IP", pod_ip)
        return env

    def argv(self, command: list[str], args: list[str], env: Mapping[str, str]) -> list[str]:
        """Docker's rule for command/args over ENTRYPOINT/CMD, then the image's path mapping."""
        if command:
            argv = command + args
        elif args:
            argv = list(self.entrypoint) + args if self.entrypoint else list(args)
        else:
            argv = list(self.entrypoint) + list(self.cmd)
        if not argv:
            raise ImageNotFound(f'image "{self.name}" has no default command and the container gives none')
        if self.spark is not None:
            if argv[0] == "/opt/entrypoint.sh":
                argv = spark_entrypoint(argv[1:], env, self.spark)
            argv = [map_spark_path(argv[0], self.spark)] + [map_streamjob_path(a) for a in argv[1:]]
        return argv


def map_spark_path(path: str, spark: Environment) -> str:
    if path == SPARK_IMAGE_HOME or path.startswith(SPARK_IMAGE_HOME + "/"):
        return str(spark.spark_home) + path[len(SPARK_IMAGE_HOME) :]
    if path in ("python", "python3", "streamjob-runtime") or path.startswith("streamjob-"):
        candidate = spark.venv_bin / path
        if candidate.exists():
            return str(candidate)
    return path


def map_streamjob_path(arg: str) -> str:
    """/opt/streamjob/X (also as local:///opt/streamjob/X) → the installed job_runtime's X.

    the top-level Dockerfile links /opt/streamjob/driver.py to the installed package's
    driver.py; here the installed package is this venv's.
    """
    prefix = ""
    path = arg
    if arg.startswith("local://"):
        prefix, path = "local://", arg[len("local://"):]
    if not path.startswith(STREAMJOB_IMAGE_HOME + "/"):
        return arg
    import importlib.util

    spec = importlib.util.find_spec("job_runtime")
    if spec is None or spec.origin is None:
        return arg
    package_dir = Path(spec.origin).parent
    return prefix + str(package_dir / path[len(STREAMJOB_IMAGE_HOME) + 1:])


def _java(env: Mapping[str, str], spark: Environment) -> str:
    java_home = env.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    return shutil.which("java") or "java"


def spark_entrypoint(args: list[str], env: Mapping[str, str], spark: Environment) -> list[str]:
    """What Apache Spark's kubernetes/dockerfiles/spark/entrypoint.sh execs for these args."""
    spark_home = env.get("SPARK_HOME") or str(spark.spark_home)
    classpath = f"{env.get('SPARK_CLASSPATH', '')}:{spark_home}/jars/*"
    if env.get("SPARK_EXTRA_CLASSPATH"):
        classpath += ":" + env["SPARK_EXTRA_CLASSPATH"]
    if "HADOOP_CONF_DIR" in env:
        classpath = f"{env['HADOOP_CONF_DIR']}:{classpath}"
    if "SPARK_CONF_DIR" in env:
        classpath = f"{env['SPARK_CONF_DIR']}:{classpath}"
    else:
        classpath = f"{spark_home}/conf:{classpath}"
    if not args:
        raise ImageNotFound("the runtime image's entrypoint needs a command (driver, executor or a program)")
    if args[0] == "driver":
        return [
            f"{spark_home}/bin/spark-submit",
            "--conf",
            f"spark.driver.bindAddress={env.get('SPARK_DRIVER_BIND_ADDRESS', '')}",
            "--deploy-mode",
            "client",
            *args[1:],
        ]
    if args[0] == "executor":
        opts = sorted(
            ((k, v) for k, v in env.items() if k.startswith("SPARK_JAVA_OPT_")),
            key=lambda kv: int(kv[0].rsplit("_", 1)[1]) if kv[0].rsplit("_", 1)[1].isdigit() else 0,
        )
        memory = env.get("SPARK_EXECUTOR_MEMORY", "")
        return [
            _java(env, spark),
            *[v for _, v in opts],
            f"-Xms{memory}",
            f"-Xmx{memory}",
            "-cp",
            f"{classpath}:{env.get('SPARK_DIST_CLASSPATH', '')}",
            "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
            "--driver-url", env.get("SPARK_DRIVER_URL", ""),
            "--executor-id", env.get("SPARK_EXECUTOR_ID", ""),
            "--cores", env.get("SPARK_EXECUTOR_CORES", ""),
            "--app-id", env.get("SPARK_APPLICATION_ID", ""),
            "--hostname", env.get("SPARK_EXECUTOR_POD_IP", ""),
            "--resourceProfileId", env.get("SPARK_RESOURCE_PROFILE_ID", ""),
            "--podName", env.get("SPARK_EXECUTOR_POD_NAME", ""),
        ]
    return list(args)


def repository(image: str) -> str:
    """``ghcr.io/x/y:1.0@sha256:...`` → ``ghcr.io/x/y``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rfind(":")]
    return name


def lookup(image: str, environment: Environment) -> Image:
    repo = repository(image)
    short = repo.rsplit("/", 1)[-1]
    venv_path = f"{environment.venv_bin}:{HOST_PATH}"
    if repo.endswith(RUNTIME_REPOSITORY_SUFFIX) or repo.endswith(OPERATOR_REPOSITORY_SUFFIX):
        env = {
            "PATH": venv_path,
            "SPARK_HOME": str(environment.spark_home),
            "PYSPARK_PYTHON": str(environment.venv_bin / "python"),
            "LANG": "C.UTF-8",
        }
        if environment.java_home:
            env["JAVA_HOME"] = str(environment.java_home)
        if environment.jars_dir:
            env["STREAMJOB_JARS_DIR"] = str(environment.jars_dir)
            env["SPARK_DIST_CLASSPATH"] = f"{environment.jars_dir}/*"
        return Image(image, env=env, entrypoint=("/opt/entrypoint.sh",), spark=environment)
    if short in ("busybox", "alpine", "debian", "ubuntu"):
        return Image(image, env={"PATH": HOST_PATH}, cmd=("sh",))
    if short == "python":
        return Image(image, env={"PATH": venv_path, "LANG": "C.UTF-8"}, cmd=("python3",))
    raise ImageNotFound(
        f'failed to pull image "{image}": not in the test bed\'s image table '
        f"(known: */{RUNTIME_REPOSITORY_SUFFIX}, busybox, alpine, debian, ubuntu, python)"
    )


def resolve(image: str, environment: Environment) -> Image:
    """An image built here (run inside its root filesystem), else the table's entry."""
    from testbed import imagestore

    stored = imagestore.inspect(image)
    return lookup(image, environment) if stored is None else built(stored)


def built(stored: imagestore.StoredImage) -> Image:
    from testbed import imagestore

    return Image(stored.name, env=stored.env, entrypoint=stored.entrypoint, cmd=stored.cmd,
                 root=imagestore.rootfs(stored), user=stored.user, working_dir=stored.working_dir,
                 image_id=stored.image_id)


def default_environment(jars_dir: Path | None) -> Environment:
    from testbed import locate

    java_home = os.environ.get("JAVA_HOME")
    return Environment(
        venv_bin=locate.venv_bin(),
        spark_home=locate.spark_home(),
        jars_dir=jars_dir.resolve() if jars_dir else None,  # a link under /tmp would hide under a /tmp volume
        java_home=Path(java_home) if java_home else None,
    )
