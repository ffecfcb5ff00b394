"""``stormpy certs``: a small CA and per-host and per-user certificates (the ``cryptography`` package).

For a test or small cluster. ``make_ca(dir)`` writes ``ca.pem`` / ``ca-key.pem``;
``make_cert(dir, name, ...)`` writes ``<name>.pem`` / ``<name>-key.pem`` signed by that CA,
with the subject CN ``name`` (the principal Nimbus authorizes), optional OUs (groups) and, for
hosts, DNS names and IP addresses in the subjectAltName (clients check them). Keys are
ECDSA P-256 and written 0600. A company CA replaces all of this: point ``storm.tls.cafile`` at
its CA certificate and ``storm.tls.certfile`` / ``keyfile`` at certificates it issued.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from stormpy.errors import UserError

CA_CERT, CA_KEY = "ca.pem", "ca-key.pem"


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _key_pem(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,  # type: ignore[attr-defined]
                             serialization.NoEncryption())


def make_ca(directory: str | os.PathLike[str], name: str = "stormpy CA", days: int = 3650) -> Path:
    """A self-signed CA in ``directory`` (``ca.pem``, ``ca-key.pem``); returns the cert path."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(out / CA_KEY, _key_pem(key), private=True)
    _write(out / CA_CERT, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return out / CA_CERT


def make_cert(directory: str | os.PathLike[str], name: str, hosts: Sequence[str] = (), groups: Sequence[str] = (),
              days: int = 825, not_before: dt.datetime | None = None) -> Path:
    """A certificate for ``name`` signed by the CA in ``directory``; ``hosts`` (DNS names or IPs)
    go in the subjectAltName (a host certificate), ``groups`` become OUs. Returns the cert path.
    ``not_before`` (tests) back-dates it, so ``days`` counted from there can lie in the past."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(directory)
    if not name or "/" in name or name.startswith("."):
        raise UserError(f"a certificate name must be a plain name (it is the file name and the CN): {name!r}")
    try:
        ca_key = serialization.load_pem_private_key((out / CA_KEY).read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((out / CA_CERT).read_bytes())
    except (OSError, ValueError) as exc:
        raise UserError(f"no CA in {out} ({exc}): run `stormpy certs ca --dir {out}` first") from None
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, g) for g in groups]
    start = not_before or dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    builder = (x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                              critical=False))
    if hosts:
        alt: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alt.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    _write(out / f"{name}-key.pem", _key_pem(key), private=True)
    _write(out / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM), private=False)
    return out / f"{name}.pem"
