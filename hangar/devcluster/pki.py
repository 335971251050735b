"""A throw-away PKI for the local control plane: CA, apiserver serving cert, admin client cert, SA keys."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        b = b.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def write_pki(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hangar-dev-ca")])
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    srv_key = _key()
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        *(
            x509.DNSName(n)
            for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
        ),
    ]
    srv = _cert(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        srv_key,
        ca_name,
        ca_key,
        server=True,
        sans=sans,
    )
    adm_key = _key()
    adm = _cert(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "hangar-admin"),
            ]
        ),
        adm_key,
        ca_name,
        ca_key,
    )
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = serialization.Encoding.PEM
    files = {
        "ca.crt": ca.public_bytes(pem),
        "ca.key": _pem_key(ca_key),
        "apiserver.crt": srv.public_bytes(pem),
        "apiserver.key": _pem_key(srv_key),
        "admin.crt": adm.public_bytes(pem),
        "admin.key": _pem_key(adm_key),
        "sa.key": _pem_key(sa),
        "sa.pub": sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    }
    for name, data in files.items():
        path = d / name
        path.write_bytes(data)
        path.chmod(0o600)
