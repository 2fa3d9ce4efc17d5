"""Spark settings that point s3a:// at the test bed's S3 server.

Called by tests and by ``testbed.cli`` (printed for users). Pure: values in,
a dict of Spark confs out.
"""

from __future__ import annotations

from pathlib import Path

from testbed.s3 import S3Credentials


def s3a_conf(credentials: S3Credentials, jars_dir: Path | None) -> dict[str, str]:
    conf = {
        "spark.hadoop.fs.s3a.endpoint": credentials.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": credentials.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": credentials.access_key,
        "spark.hadoop.fs.s3a.secret.key": credentials.secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    if jars_dir is not None:
        # On the JVM classpath rather than spark.jars: Hadoop finds FileSystem
        # implementations through the application class loader.
        conf["spark.driver.extraClassPath"] = f"{jars_dir}/*"
        conf["spark.executor.extraClassPath"] = f"{jars_dir}/*"
    return conf
