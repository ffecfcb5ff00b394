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
- the log viewer's signed requests from ``stormpy logs`` (:func:`sign_log_request`): a MAC
  over a timestamp and the URL with a key derived for that purpose only.

It is never a password: the UI and the log viewer log people in from ``ui.users.file``
(:class:`HttpLogins`, scrypt hashes made by ``stormpy ui-passwd``), and they require that login
whenever this secret is set (``http_login_required``), so HTTP is not a way around Thrift
authentication.

ZooKeeper digest ACLs use Storm's own keys (``storm.zookeeper.auth.scheme: digest`` and
``storm.zookeeper.auth.payload: user:password``): :func:`zookeeper_acl` gives kazoo's
``auth_data`` and ``default_acl`` so every node stormpy creates is readable and writable by
that identity only.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import socket
import threading
import time
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
        # Refused, not warned: every account on the host could read it and take over the cluster.
        raise UserError(f"the shared secret file {file} is world-readable: run `chmod 600 {file}` "
                        "(storm.thrift.auth.secret.file)")
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
        topology = conf.get(cfg.STORM_ZOOKEEPER_TOPOLOGY_AUTH_PAYLOAD.name)
        superuser = super_acl(conf)
        if not topology or not superuser:
            return None, None
        # A worker: its topology's identity; what it creates (heartbeats, errors) is readable
        # by the daemons and by its own topology only.
        from kazoo.security import Permissions

        return ([("digest", str(topology))],
                [_acl_of(superuser, Permissions.ALL), _acl_of(f"digest:{digest_id(str(topology))}", Permissions.ALL)])
    scheme = conf.get(cfg.STORM_ZOOKEEPER_AUTH_SCHEME.name) or "digest"
    if scheme != "digest":
        raise UserError(f"storm.zookeeper.auth.scheme {scheme!r} is not supported (use digest)")
    user, sep, password = str(payload).partition(":")
    if not sep or not user or not password:
        raise UserError("storm.zookeeper.auth.payload must be 'user:password'")
    from kazoo.security import make_digest_acl

    return [("digest", str(payload))], [make_digest_acl(user, password, all=True)]


# ---------------------------------------------------------------- per-topology credentials
TOPOLOGY_ZK_USER_PREFIX = "topology-"


def topology_zookeeper_payload(cluster_payload: str, topology_id: str) -> str:
    """``user:password`` of a topology's own ZooKeeper digest identity (Storm's
    ``storm.zookeeper.topology.auth.payload``).

    Derived from the cluster's payload and the topology id (HMAC-SHA256), so Nimbus and every
    supervisor compute the same one and nothing is stored: a worker receives only its
    topology's, which cannot be turned back into the cluster's or into another topology's.
    """
    key = derive(cluster_payload.encode(), f"zookeeper:{topology_id}")
    password = base64.urlsafe_b64encode(key).decode().rstrip("=")
    return f"{TOPOLOGY_ZK_USER_PREFIX}{topology_id}:{password}"


def digest_id(payload: str) -> str:
    """ZooKeeper's public id ``user:base64(sha1(user:password))`` of a digest ``payload``."""
    user = payload.partition(":")[0]
    hashed = base64.b64encode(hashlib.sha1(payload.encode()).digest()).decode()
    return f"{user}:{hashed}"


def super_acl(conf: Mapping[str, Any]) -> str | None:
    """``digest:user:hash`` of the daemons' ZooKeeper identity (Storm's
    ``storm.zookeeper.superACL``): given to workers so the nodes they create stay readable by
    Nimbus and the supervisors, without giving them the password."""
    explicit = conf.get(cfg.STORM_ZOOKEEPER_SUPERACL.name)
    if explicit:
        return str(explicit)
    payload = conf.get(cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name)
    return f"digest:{digest_id(str(payload))}" if payload else None


def _acl_of(spec: str, perms: int) -> Any:
    from kazoo.security import ACL, Id

    scheme, sep, ident = spec.partition(":")
    if not sep or not ident:
        raise UserError(f"storm.zookeeper.superACL must be 'scheme:id' (digest:user:hash), not {spec!r}")
    return ACL(perms, Id(scheme, ident))


def topology_node_acl(conf: Mapping[str, Any], topology_id: str, *, writable: bool) -> list[Any] | None:
    """ACL of a node that belongs to ``topology_id`` (its StormBase and assignment: read;
    its heartbeats and errors: ``writable``): the daemons' identity may do everything, the
    topology's own identity reads (or also writes). None when ZooKeeper ACLs are off, or in a
    worker of another topology (its own identity has no business with that node)."""
    from kazoo.security import Permissions

    topology = conf.get(cfg.STORM_ZOOKEEPER_TOPOLOGY_AUTH_PAYLOAD.name)
    cluster = conf.get(cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name)
    if cluster:
        topology = topology_zookeeper_payload(str(cluster), topology_id)
    elif not topology or not str(topology).startswith(f"{TOPOLOGY_ZK_USER_PREFIX}{topology_id}:"):
        return None
    superuser = super_acl(conf)
    if superuser is None:
        return None
    perms = Permissions.ALL if writable else Permissions.READ
    return [_acl_of(superuser, Permissions.ALL), _acl_of(f"digest:{digest_id(str(topology))}", perms)]


def holds_topology_identity_only(conf: Mapping[str, Any]) -> bool:
    """True in a worker under ZooKeeper ACLs: it has its topology's identity, not the daemons'
    (it may read only its topology's nodes, so it never creates or probes the cluster's roots)."""
    return (not conf.get(cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name)
            and bool(conf.get(cfg.STORM_ZOOKEEPER_TOPOLOGY_AUTH_PAYLOAD.name)))


def curve_topology_keys(conf: Mapping[str, Any], topology_id: str) -> tuple[bytes, bytes] | None:
    """A worker's CURVE pair: from ``storm.messaging.curve.topology.secretkey`` (what its
    supervisor gave it), else derived from the shared secret (a daemon, or a local cluster)."""
    secretkey = conf.get(cfg.STORM_MESSAGING_CURVE_TOPOLOGY_SECRETKEY.name)
    if secretkey:
        import zmq

        key = str(secretkey).encode()
        return zmq.curve_public(key), key
    secret = read_secret(conf)
    return None if secret is None else curve_keys(secret, topology_id)


#: Keys of a supervisor's config that never reach a worker: the cluster's credentials.
WORKER_WITHHELD_KEYS = (cfg.STORM_THRIFT_AUTH_SECRET_FILE.name, cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name,
                        cfg.UI_USERS_FILE.name, cfg.NIMBUS_THRIFT_TLS_KEYFILE.name, cfg.UI_TLS_KEYFILE.name,
                        cfg.LOGVIEWER_TLS_KEYFILE.name, cfg.SUPERVISOR_WORKER_TLS_CERTFILE.name,
                        cfg.SUPERVISOR_WORKER_TLS_KEYFILE.name)


def worker_conf(supervisor_conf: Mapping[str, Any], topology_id: str) -> dict[str, Any]:
    """The config a supervisor writes for one worker of ``topology_id``: its own config without
    the cluster's credentials (the shared secret's file, the ZooKeeper payload, daemon TLS keys,
    any key that looks like a credential), plus that topology's credentials only: its ZooKeeper
    identity (with the daemons' public ACL id) and its CURVE secret key."""
    conf = {k: v for k, v in supervisor_conf.items()
            if k not in WORKER_WITHHELD_KEYS and not cfg._looks_like_credential(k)}
    worker_tls = (supervisor_conf.get(cfg.SUPERVISOR_WORKER_TLS_CERTFILE.name),
                  supervisor_conf.get(cfg.SUPERVISOR_WORKER_TLS_KEYFILE.name))
    if all(worker_tls):
        conf[cfg.STORM_TLS_CERTFILE.name], conf[cfg.STORM_TLS_KEYFILE.name] = worker_tls
    elif not supervisor_conf.get(cfg.STORM_ZOOKEEPER_SSL_ENABLE.name):
        conf.pop(cfg.STORM_TLS_KEYFILE.name, None)     # workers speak TLS to ZooKeeper only
    payload = supervisor_conf.get(cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name)
    if payload:
        conf[cfg.STORM_ZOOKEEPER_TOPOLOGY_AUTH_PAYLOAD.name] = topology_zookeeper_payload(str(payload), topology_id)
        conf[cfg.STORM_ZOOKEEPER_SUPERACL.name] = super_acl(supervisor_conf)
    if cfg.STORM_MESSAGING_CURVE_ENABLE.coerce(supervisor_conf.get(cfg.STORM_MESSAGING_CURVE_ENABLE.name) or False):
        secret = read_secret(supervisor_conf)
        if secret is not None:
            conf[cfg.STORM_MESSAGING_CURVE_TOPOLOGY_SECRETKEY.name] = curve_keys(secret, topology_id)[1].decode()
    return conf


# ---------------------------------------------------------------- HTTP logins (UI, log viewer)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1     # ~16 MiB, tens of ms per check: slow to brute-force
SCRYPT_PREFIX = "scrypt"
LOG_SIGNATURE_HEADER = "X-Stormpy-Signature"
LOG_SIGNATURE_MAX_SKEW_SECS = 300


def http_login_required(conf: Mapping[str, Any]) -> bool:
    """True when the UI and the log viewer must log people in: ``ui.auth.enable``, or Thrift
    authentication on (an anonymous HTTP client must not do what Thrift refuses it)."""
    return bool(conf.get(cfg.UI_AUTH_ENABLE.name)) or bool(conf.get(cfg.STORM_THRIFT_AUTH_SECRET_FILE.name))


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``scrypt$N$r$p$salt$hash`` (base64) for a ``ui.users.file`` line; a fresh salt by default."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    b64 = base64.b64encode
    return f"{SCRYPT_PREFIX}${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def _parse_hash(encoded: str) -> tuple[int, int, int, bytes, bytes]:
    """Raises ValueError for anything but a well-formed scrypt entry (plain passwords included)."""
    scheme, n, r, p, salt, digest = encoded.split("$")
    if scheme != SCRYPT_PREFIX:
        raise ValueError(scheme)
    try:
        return int(n), int(r), int(p), base64.b64decode(salt, validate=True), base64.b64decode(digest, validate=True)
    except binascii.Error:
        raise ValueError("not base64") from None


def verify_password(password: str, encoded: str) -> bool:
    """Whether ``password`` matches a :func:`hash_password` entry (constant-time compare)."""
    try:
        n, r, p, salt, digest = _parse_hash(encoded)
        got = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(digest),
                             maxmem=256 * 1024 * 1024)
    except ValueError:
        return False
    return hmac.compare_digest(got, digest)


def read_users_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """``user -> scrypt entry`` from a users file (``user:scrypt$...`` lines, ``#`` comments).

    A line holding a plain password is refused with its line number (it would be a password
    anyone who reads the file can use); so is a missing, unreadable or empty file.
    """
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read ui.users.file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    users: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, encoded = line.partition(":")
        try:
            if not sep or not user:
                raise ValueError(line)
            _parse_hash(encoded)
        except ValueError:
            raise UserError(f"ui.users.file {path} line {number} is not 'user:scrypt$...' (plain passwords are "
                            f"not accepted): make the entry with `stormpy ui-passwd --file {path} USER`") from None
        users[user] = encoded
    if not users:
        raise UserError(f"ui.users.file {path} holds no login: add one with `stormpy ui-passwd --file {path} USER`")
    return users


def set_user_password(path: str | os.PathLike[str], user: str, password: str) -> bool:
    """Add or replace ``user``'s entry in the users file (created 0600); True when it replaced one."""
    if not user or ":" in user or user.strip() != user or user.startswith("#"):
        raise UserError(f"a UI user name must be non-empty, without ':' or surrounding spaces: {user!r}")
    if len(password) < 8:
        raise UserError("the password must be at least 8 characters")
    file = Path(path).expanduser()
    try:
        lines = file.read_text(encoding="utf-8").splitlines() if file.exists() else []
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror or exc}") from None
    entry = f"{user}:{hash_password(password)}"
    kept = [line for line in lines if line.strip().partition(":")[0] != user]
    replaced = len(kept) != len(lines)
    tmp = file.with_name(file.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join([*kept, entry]) + "\n")
        os.replace(tmp, file)
    except OSError as exc:
        raise UserError(f"cannot write {file}: {exc.strerror or exc}") from None
    return replaced


def _log_key(secret: bytes) -> bytes:
    return derive(secret, "logviewer")


def sign_log_request(secret: bytes, target: str, now: float | None = None) -> str:
    """The :data:`LOG_SIGNATURE_HEADER` value for a GET of ``target`` (path and query).

    ``stormpy logs`` holds the shared secret but no UI password; this lets it read logs from a
    log viewer that requires a login. Only a MAC crosses the wire: a sniffed one reads the same
    URL for a few minutes and nothing else."""
    stamp = str(int(time.time() if now is None else now))
    mac = hmac.new(_log_key(secret), f"{stamp} GET {target}".encode(), hashlib.sha256).hexdigest()
    return f"{stamp}:{mac}"


def check_log_signature(secret: bytes, target: str, value: str, now: float | None = None) -> bool:
    stamp, _, mac = value.partition(":")
    if not stamp.isdigit() or abs((time.time() if now is None else now) - int(stamp)) > LOG_SIGNATURE_MAX_SKEW_SECS:
        return False
    expected = hmac.new(_log_key(secret), f"{stamp} GET {target}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac.encode(), expected.encode())


class HttpLogins:
    """HTTP basic logins checked against ``ui.users.file``: one class for the UI and the log viewer.

    Verified ``(user, password)`` pairs are remembered (as a keyed hash, never the password) so
    a page polling every few seconds does not cost a scrypt each time; the memory is per
    process and bounded.
    """

    CACHE_MAX = 256

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = dict(users)
        self._key = os.urandom(32)
        self._verified: dict[bytes, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], who: str, required: bool = True) -> "HttpLogins | None":
        """The logins when :func:`http_login_required`, else None.

        With login required but no ``ui.users.file``: a UserError naming why (``required``), or
        None for a caller that has another way in (the log viewer's signed requests)."""
        if not http_login_required(conf):
            return None
        path = conf.get(cfg.UI_USERS_FILE.name)
        if not path:
            if not required:
                return None
            reason = ("storm.thrift.auth.secret.file is set" if conf.get(cfg.STORM_THRIFT_AUTH_SECRET_FILE.name)
                      else "ui.auth.enable is on")
            raise UserError(f"the {who} needs a login because {reason}: set ui.users.file (make entries with "
                            "`stormpy ui-passwd --file FILE USER`)")
        return cls(read_users_file(str(path)))

    def user(self, authorization: str | None) -> str | None:
        """The logged-in user of an ``Authorization: Basic ...`` header, or None."""
        scheme, _, encoded = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        entry = self._users.get(user)
        if not sep or entry is None:
            return None
        memo = hmac.new(self._key, f"{user}\0{password}\0{entry}".encode(), hashlib.sha256).digest()
        with self._lock:
            if memo in self._verified:
                return user
        if not verify_password(password, entry):
            return None
        with self._lock:
            if len(self._verified) >= self.CACHE_MAX:
                self._verified.clear()
            self._verified[memo] = user
        return user
