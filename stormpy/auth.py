"""Shared-secret authentication (DESIGN 13): the Thrift handshake, key derivation, ZooKeeper ACLs.

Off by default, as in Storm. One secret, in the file named by ``storm.thrift.auth.secret.file``
(the same path on every host; readable only by the account that runs stormpy), is known to the
CLI, the UI, Nimbus, the supervisors and the workers. From it:

- the Thrift handshake (:func:`client_handshake` / :func:`server_handshake`): before the first
  frame, client and Nimbus prove to each other that they know the secret (HMAC-SHA256 over two
  fresh nonces; the secret never crosses the wire). A plain Thrift client that sends a frame
  instead gets one TApplicationException saying authentication is required;
- the ZeroMQ CURVE keys of a topology's data plane (:func:`curve_keys`), derived per topology
  on each host, so they are never written anywhere (not to ZooKeeper, not to disk);
- the UI login falls back to it when no ``ui.users.file`` is given.

ZooKeeper digest ACLs use Storm's own keys (``storm.zookeeper.auth.scheme: digest`` and
``storm.zookeeper.auth.payload: user:password``): :func:`zookeeper_acl` gives kazoo's
``auth_data`` and ``default_acl`` so every node stormpy creates is readable and writable by
that identity only.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy.errors import UserError

log = logging.getLogger(__name__)

MAGIC = b"SPA1"                 # first bytes of an authenticating client (a frame length never is)
NONCE_BYTES = 32
MAC_BYTES = 32
ACCEPTED = b"OK"
REFUSED = b"NO"
HANDSHAKE_TIMEOUT_SECS = 10.0


class AuthError(Exception):
    """The peer could not prove it knows the shared secret (or refused our proof)."""


def read_secret(conf: Mapping[str, Any]) -> bytes | None:
    """The shared secret from ``storm.thrift.auth.secret.file``; None when authentication is off.

    A named file that is missing, empty or world-readable is a one-line UserError: a cluster
    that asked for authentication must not silently run without it.
    """
    path = conf.get(cfg.STORM_THRIFT_AUTH_SECRET_FILE.name)
    if not path:
        return None
    file = Path(str(path)).expanduser()
    try:
        secret = file.read_bytes().strip()
        mode = file.stat().st_mode
    except OSError as exc:
        raise UserError(f"cannot read the shared secret file {file} (storm.thrift.auth.secret.file): "
                        f"{exc.strerror or exc}") from None
    if len(secret) < 16:
        raise UserError(f"the shared secret in {file} is shorter than 16 bytes; "
                        "make one with `head -c 32 /dev/urandom | base64 > FILE`")
    if mode & 0o004:
        log.warning("the shared secret file %s is world-readable; chmod 600 it", file)
    return secret


def derive(secret: bytes, label: str) -> bytes:
    """A 32-byte key for one purpose (``label``), so no two uses share key material."""
    return hmac.new(secret, b"stormpy:" + label.encode(), hashlib.sha256).digest()


def _mac(secret: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(derive(secret, "thrift"), role + client_nonce + server_nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, remaining = [], n
    while remaining:
        data = sock.recv(remaining)
        if not data:
            raise AuthError("the peer closed the connection during the authentication handshake; "
                            "does it have storm.thrift.auth.secret.file set?")
        chunks.append(data)
        remaining -= len(data)
    return b"".join(chunks)


def client_handshake(sock: socket.socket, secret: bytes) -> None:
    """Prove to Nimbus that we know the secret and check that it does too (raises AuthError)."""
    try:
        _client_handshake(sock, secret)
    except (ConnectionError, socket.timeout) as exc:
        raise AuthError(f"the server broke off the authentication handshake ({exc}); "
                        "does it have storm.thrift.auth.secret.file set?") from None


def _client_handshake(sock: socket.socket, secret: bytes) -> None:
    client_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + client_nonce)
    reply = _recv_exact(sock, NONCE_BYTES + MAC_BYTES)
    server_nonce, server_mac = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
    if not hmac.compare_digest(server_mac, _mac(secret, b"S", client_nonce, server_nonce)):
        raise AuthError("the server does not know the shared secret (storm.thrift.auth.secret.file differs)")
    sock.sendall(_mac(secret, b"C", client_nonce, server_nonce))
    verdict = _recv_exact(sock, len(ACCEPTED))
    if verdict != ACCEPTED:
        raise AuthError("the server refused our credentials (storm.thrift.auth.secret.file differs)")


def server_handshake(sock: socket.socket, secret: bytes, first: bytes) -> None:
    """Nimbus side, after reading the client's first 4 bytes ``first`` (== MAGIC); raises AuthError."""
    client_nonce = _recv_exact(sock, NONCE_BYTES)
    server_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(server_nonce + _mac(secret, b"S", client_nonce, server_nonce))
    client_mac = _recv_exact(sock, MAC_BYTES)
    if not hmac.compare_digest(client_mac, _mac(secret, b"C", client_nonce, server_nonce)):
        try:
            sock.sendall(REFUSED)
        except OSError:
            pass
        raise AuthError("wrong credentials (the client's shared secret differs)")
    sock.sendall(ACCEPTED)


# ---------------------------------------------------------------- ZeroMQ CURVE
def curve_keys(secret: bytes, topology_id: str) -> tuple[bytes, bytes]:
    """(public, secret) CURVE key pair (Z85) of a topology's workers, derived from the secret.

    Every worker of the topology is the CURVE server of its receive socket and a client of its
    peers' with this one pair: a process without the shared secret cannot derive the server's
    public key, so it cannot complete a CURVE handshake with any worker, and the receive side's
    authenticator accepts only this public key from clients.
    """
    import zmq
    from zmq.utils import z85

    secret_key = z85.encode(derive(secret, f"curve:{topology_id}"))
    return zmq.curve_public(secret_key), secret_key


# ---------------------------------------------------------------- ZooKeeper ACLs
def zookeeper_acl(conf: Mapping[str, Any]) -> tuple[list[tuple[str, str]] | None, list[Any] | None]:
    """kazoo's ``(auth_data, default_acl)`` from Storm's keys; ``(None, None)`` when not set."""
    payload = conf.get(cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name)
    if not payload:
        return None, None
    scheme = conf.get(cfg.STORM_ZOOKEEPER_AUTH_SCHEME.name) or "digest"
    if scheme != "digest":
        raise UserError(f"storm.zookeeper.auth.scheme {scheme!r} is not supported (use digest)")
    user, sep, password = str(payload).partition(":")
    if not sep or not user or not password:
        raise UserError("storm.zookeeper.auth.payload must be 'user:password'")
    from kazoo.security import make_digest_acl

    return [("digest", str(payload))], [make_digest_acl(user, password, all=True)]
