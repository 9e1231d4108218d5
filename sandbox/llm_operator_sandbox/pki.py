"""Certificates and keys for a local control plane (:mod:`.cluster`), with ``cryptography``.

One CA signs the API server's serving certificate and every client certificate; Kubernetes
takes a client certificate's CN as the user name and its O entries as groups, so the
admin's is ``O=system:masters`` and the controller-manager's and the scheduler's carry
their ``system:kube-*`` names, which the built-in RBAC roles bind. The service-account
key pair signs and checks ServiceAccount tokens. Nothing here leaves the work directory.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, written as PEM files."""

    cert: Path
    key: Path


class Pki:
    """A CA in ``directory`` that issues serving and client certificates."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_name = _name("llm-operator-local-ca")
        builder = (x509.CertificateBuilder().subject_name(self._ca_name)
                   .issuer_name(self._ca_name).public_key(self._ca_key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(self._now)
                   .not_valid_after(self._now + dt.timedelta(days=VALID_DAYS))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                   .add_extension(x509.KeyUsage(
                       digital_signature=True, key_cert_sign=True, crl_sign=True,
                       content_commitment=False, key_encipherment=False,
                       data_encipherment=False, key_agreement=False, encipher_only=False,
                       decipher_only=False), True))
        self._ca_cert = builder.sign(self._ca_key, hashes.SHA256())
        self.ca = Pair(self.dir / "ca.crt", self.dir / "ca.key")
        self.ca.cert.write_bytes(self._ca_cert.public_bytes(serialization.Encoding.PEM))
        self.ca.key.write_bytes(_key_pem(self._ca_key))
        self.ca.key.chmod(0o600)

    def issue(self, name: str, cn: str, orgs: tuple[str, ...] = (), *, server: bool = False,
              hosts: tuple[str, ...] = ()) -> Pair:
        """A certificate for ``cn`` (groups ``orgs``) signed by the CA; a serving one
        (``server``) lists ``hosts`` (names or IPs) as subject alternative names."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(_name(cn, orgs))
                   .issuer_name(self._ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(self._now)
                   .not_valid_after(self._now + dt.timedelta(days=VALID_DAYS))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), False))
        if hosts:
            alt: list[x509.GeneralName] = []
            for h in hosts:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    alt.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = Pair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair

    def service_account_keys(self) -> Pair:
        """The RSA pair that signs ServiceAccount tokens (``sa.pub`` / ``sa.key``)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pair = Pair(self.dir / "sa.pub", self.dir / "sa.key")
        pair.cert.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair
