"""Kubeconfig files for the test bed's users (admin, controller-manager, kubelet).

Called by ``testbed.cluster``. Certificates are referenced by absolute path so
the files work from any working directory.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.pki import CertPair


def write(path: Path, *, server: str, ca_file: Path, client: CertPair, user: str, context: str = "streamjob-testbed") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": context, "cluster": {"server": server, "certificate-authority": str(ca_file.resolve())}}
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(client.cert.resolve()),
                    "client-key": str(client.key.resolve()),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user, "namespace": "default"}}],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
