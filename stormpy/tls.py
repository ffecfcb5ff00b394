"""TLS for every channel (issue 25): one place that turns config keys into ``ssl`` contexts.

Python's ``ssl`` does all the cryptography. A channel (``nimbus.thrift``, ``ui``,
``logviewer``) names its certificate, key and CA with ``<channel>.tls.certfile`` /
``keyfile`` / ``cafile``, each falling back to ``storm.tls.*`` (the host's or user's own,
made by ``stormpy certs``). Servers require TLS 1.2+; with ``<channel>.tls.client.auth:
required`` they also require a client certificate from the CA (mutual TLS), whose subject
common name is the caller's principal (:func:`peer_principal`). Clients always verify the
server's certificate and host name against the CA and show ``storm.tls.certfile`` when set.

A missing file, an unreadable key or an expired own certificate is a one-line ``UserError``
before any connection is tried, so ``stormpy list`` with an expired user certificate says so
instead of printing an SSL alert.
"""
from __future__ import annotations

import datetime as dt
import logging
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy.errors import UserError

log = logging.getLogger(__name__)

CHANNELS = ("nimbus.thrift", "ui", "logviewer")
_ENABLE = {"nimbus.thrift": cfg.NIMBUS_THRIFT_TLS_ENABLE, "ui": cfg.UI_TLS_ENABLE, "logviewer": cfg.LOGVIEWER_TLS_ENABLE}


def enabled(conf: Mapping[str, Any], channel: str) -> bool:
    """Whether ``channel`` runs over TLS (``<channel>.tls.enable``)."""
    return bool(cfg.KEYS[_ENABLE[channel].name].coerce(conf.get(_ENABLE[channel].name)))


def client_auth(conf: Mapping[str, Any], channel: str) -> str:
    """``<channel>.tls.client.auth``: ``required`` (mutual TLS), ``optional`` (a certificate
    shown must be from the CA; none is fine) or ``none``."""
    value = str(conf.get(f"{channel}.tls.client.auth") or "none").strip().lower()
    if value not in ("none", "optional", "required"):
        raise UserError(f"{channel}.tls.client.auth must be 'required', 'optional' or 'none', not {value!r}")
    return value


def client_auth_required(conf: Mapping[str, Any], channel: str) -> bool:
    """``<channel>.tls.client.auth: required`` (mutual TLS) on an enabled channel."""
    return enabled(conf, channel) and client_auth(conf, channel) == "required"


def _file(conf: Mapping[str, Any], channel: str | None, what: str) -> str | None:
    value = conf.get(f"{channel}.tls.{what}") if channel else None
    return str(value) if value else (str(conf[f"storm.tls.{what}"]) if conf.get(f"storm.tls.{what}") else None)


def _need(conf: Mapping[str, Any], channel: str | None, what: str) -> str:
    path = _file(conf, channel, what)
    key = f"{channel}.tls.{what} or storm.tls.{what}" if channel else f"storm.tls.{what}"
    if not path:
        raise UserError(f"TLS is on but {key} is not set (make certificates with `stormpy certs`)")
    if not Path(path).expanduser().is_file():
        raise UserError(f"cannot read {path} ({key}): no such file")
    return str(Path(path).expanduser())


def check_not_expired(certfile: str, key: str = "storm.tls.certfile") -> None:
    """A one-line UserError when the PEM certificate ``certfile`` is expired or not yet valid."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(Path(certfile).read_bytes())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the certificate {certfile} ({key}): {exc}") from None
    now = dt.datetime.now(dt.timezone.utc)
    if cert.not_valid_after_utc < now:
        raise UserError(f"the certificate {certfile} ({key}) expired on "
                        f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: make a new one (`stormpy certs user`)")
    if cert.not_valid_before_utc > now:
        raise UserError(f"the certificate {certfile} ({key}) is not valid before "
                        f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (check this host's clock)")


def _load_chain(ctx: ssl.SSLContext, conf: Mapping[str, Any], channel: str | None) -> None:
    certfile, keyfile = _need(conf, channel, "certfile"), _need(conf, channel, "keyfile")
    check_not_expired(certfile, f"{channel}.tls.certfile" if channel else "storm.tls.certfile")
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load the TLS certificate {certfile} with key {keyfile}: {exc}") from None


def server_context(conf: Mapping[str, Any], channel: str) -> ssl.SSLContext:
    """The server side of ``channel``: its certificate, and the CA of client certificates."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, conf, channel)
    mode = client_auth(conf, channel)
    if mode != "none":
        ctx.verify_mode = ssl.CERT_REQUIRED if mode == "required" else ssl.CERT_OPTIONAL
        ctx.load_verify_locations(_need(conf, channel, "cafile"))
    return ctx


def client_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """A client's context: the CA (``storm.tls.cafile``) verifies servers and their host names;
    ``storm.tls.certfile`` / ``keyfile``, when set, are shown to servers that ask."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(_need(conf, None, "cafile"))
    except ssl.SSLError as exc:
        raise UserError(f"cannot load the CA file {_file(conf, None, 'cafile')} (storm.tls.cafile): {exc}") from None
    if _file(conf, None, "certfile"):
        _load_chain(ctx, conf, None)
    return ctx


def peer_principal(sock: ssl.SSLSocket) -> tuple[str | None, tuple[str, ...]]:
    """(subject CN, OUs) of a verified peer certificate; (None, ()) without one."""
    cert = sock.getpeercert() or {}
    cn, ous = None, []
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                cn = value
            elif name == "organizationalUnitName":
                ous.append(value)
    return cn, tuple(ous)


def describe_error(exc: BaseException) -> str:
    """One line for an SSL failure, naming the usual cause."""
    detail = getattr(exc, "verify_message", None)
    text = str(getattr(exc, "reason", None) or exc) + (f" ({detail})" if detail else "")
    low = text.lower().replace("_", " ")
    if "certificate has expired" in low or "certificate expired" in low:
        return f"{text}: a certificate has expired"
    if "certificate verify failed" in low or "unknown ca" in low:
        return f"{text}: the peer's certificate is not from the CA in storm.tls.cafile"
    if "wrong version number" in low or "unexpected eof" in low or "record layer" in low:
        return f"{text}: is TLS on at both ends (nimbus.thrift.tls.enable / ui.tls.enable)?"
    if "certificate required" in low or "handshake failure" in low:
        return f"{text}: the server requires a client certificate (storm.tls.certfile)"
    return text


HTTPS_HANDSHAKE_TIMEOUT_SECS = 10.0


class TLSServerMixin:
    """For a ``ThreadingHTTPServer``: with ``tls_context`` set, each accepted connection does its
    TLS handshake on its own request thread (a slow or plaintext peer never stalls the accept
    loop); a failed handshake is logged and the connection closed before any HTTP is read."""

    tls_context: ssl.SSLContext | None = None

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        if self.tls_context is not None:
            try:
                request.settimeout(HTTPS_HANDSHAKE_TIMEOUT_SECS)
                request = self.tls_context.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (ssl.SSLError, OSError) as exc:
                log.warning("refused an HTTPS connection from %s: TLS handshake failed: %s", client_address[0], exc)
                self.shutdown_request(request)  # type: ignore[attr-defined]
                return
        super().process_request_thread(request, client_address)  # type: ignore[misc]


def https_context(conf: Mapping[str, Any], channel: str) -> ssl.SSLContext | None:
    """The server context of an HTTP ``channel`` (``ui``, ``logviewer``) when its TLS is on."""
    return server_context(conf, channel) if enabled(conf, channel) else None


def zookeeper_ssl_enabled(conf: Mapping[str, Any]) -> bool:
    return bool(cfg.STORM_ZOOKEEPER_SSL_ENABLE.coerce(conf.get(cfg.STORM_ZOOKEEPER_SSL_ENABLE.name)))


def zookeeper_client_kwargs(conf: Mapping[str, Any]) -> dict[str, Any]:
    """kazoo's TLS arguments when ``storm.zookeeper.ssl.enable`` (server certificate and host
    name checked against storm.tls.cafile; our certificate shown: the server requires one)."""
    if not zookeeper_ssl_enabled(conf):
        return {}
    certfile = _need(conf, None, "certfile")
    check_not_expired(certfile)
    return {"use_ssl": True, "verify_certs": True, "check_hostname": True, "ca": _need(conf, None, "cafile"),
            "certfile": certfile, "keyfile": _need(conf, None, "keyfile")}


def zookeeper_server_files(conf: Mapping[str, Any]) -> tuple[str, str, str]:
    """(certfile, keyfile, cafile) of ``stormpy dev-zookeeper``'s secure port."""
    return _need(conf, None, "certfile"), _need(conf, None, "keyfile"), _need(conf, None, "cafile")
