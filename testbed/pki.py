"""Certificates and keys for the test bed's control plane.

Called by ``testbed.cluster`` once per run: a CA, the API server's serving cert,
client certs (admin, controller-manager, kubelet) and the service-account
signing key pair, all written as PEM files under the run's ``pki/`` directory;
and a server keystore for the Kafka broker's TLS listener (``server_keystore``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    controller_manager: CertPair
    kubelet: CertPair
    front_proxy_client: CertPair
    apiserver_kubelet_client: CertPair
    kubelet_serving: CertPair
    sa_private_key: Path
    sa_public_key: Path


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _issue(
    *,
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    ca_cert: x509.Certificate,
    ca_key: rsa.RSAPrivateKey,
    server: bool,
    sans: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if sans:
        names: list[x509.GeneralName] = []
        for san in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                names.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def generate(directory: Path, *, node_name: str, extra_sans: tuple[str, ...] = ()) -> Pki:
    """Writes a fresh CA and every cert the run needs into ``directory``.

    ``extra_sans`` are added to the API server's and the kubelet's serving certs: the
    real node's bridge address, where pods and the API server reach them (testbed.node).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    ca_name = _name("streamjob-testbed-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca = CertPair(directory / "ca.crt", directory / "ca.key")
    _write_cert(ca_cert, ca.cert)
    _write_key(ca_key, ca.key)

    def leaf(stem: str, subject: x509.Name, *, server: bool, sans: tuple[str, ...] = ()) -> CertPair:
        key = _new_key()
        cert = _issue(subject=subject, key=key, ca_cert=ca_cert, ca_key=ca_key, server=server, sans=sans)
        pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        _write_cert(cert, pair.cert)
        _write_key(key, pair.key)
        return pair

    apiserver = leaf(
        "apiserver",
        _name("kube-apiserver"),
        server=True,
        sans=(
            "127.0.0.1",
            "10.96.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            *extra_sans,
        ),
    )
    admin = leaf("admin", _name("streamjob-admin", ("system:masters",)), server=False)
    controller_manager = leaf("controller-manager", _name("system:kube-controller-manager"), server=False)
    kubelet = leaf("kubelet", _name(f"system:node:{node_name}", ("system:nodes",)), server=False)
    front_proxy_client = leaf("front-proxy-client", _name("front-proxy-client"), server=False)
    apiserver_kubelet_client = leaf(
        "apiserver-kubelet-client", _name("kube-apiserver-kubelet-client", ("system:masters",)), server=False
    )
    kubelet_serving = leaf(
        "kubelet-serving", _name(f"system:node:{node_name}", ("system:nodes",)), server=True, sans=("127.0.0.1", node_name, *extra_sans)
    )

    sa_key = _new_key()
    sa_private = directory / "sa.key"
    sa_public = directory / "sa.pub"
    _write_key(sa_key, sa_private)
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca=ca,
        apiserver=apiserver,
        admin=admin,
        controller_manager=controller_manager,
        kubelet=kubelet,
        front_proxy_client=front_proxy_client,
        apiserver_kubelet_client=apiserver_kubelet_client,
        kubelet_serving=kubelet_serving,
        sa_private_key=sa_private,
        sa_public_key=sa_public,
    )


def _load_ca(ca: CertPair) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    """The run's CA, read back from its files."""
    cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return cert, key


def client_cert(directory: Path, ca: CertPair, stem: str, common_name: str, organizations: tuple[str, ...] = ()) -> CertPair:
    """A client cert signed by the run's CA (read back from ``ca``), for one more component's user."""
    ca_cert, ca_key = _load_ca(ca)
    key = _new_key()
    cert = _issue(subject=_name(common_name, organizations), key=key, ca_cert=ca_cert, ca_key=ca_key, server=False)
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_cert(cert, pair.cert)
    _write_key(key, pair.key)
    return pair


def server_keystore(directory: Path, ca: CertPair, stem: str, sans: tuple[str, ...], password: str) -> Path:
    """A PKCS#12 keystore (key, serving cert for `sans`, the CA) signed by the run's CA, for a Java server
    (the Kafka broker's TLS listener). Encrypted with PBE-SHA1-3DES, which every Java reads."""
    ca_cert, ca_key = _load_ca(ca)
    key = _new_key()
    cert = _issue(subject=_name(sans[0]), key=key, ca_cert=ca_cert, ca_key=ca_key, server=True, sans=sans)
    encryption = (serialization.PrivateFormat.PKCS12.encryption_builder()
                  .kdf_rounds(50000)
                  .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
                  .hmac_hash(hashes.SHA1())
                  .build(password.encode()))
    path = directory / f"{stem}.p12"
    path.write_bytes(pkcs12.serialize_key_and_certificates(stem.encode(), key, cert, [ca_cert], encryption))
    path.chmod(0o600)
    return path
