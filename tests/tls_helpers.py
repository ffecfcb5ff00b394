"""Test helpers for TLS (issue 25): a certificate set made by ``stormpy.certs`` and a TCP relay
that can flip one byte of what the client sends (an on-path attacker)."""
from __future__ import annotations

import datetime as dt
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from stormpy.certs import make_ca, make_cert


@dataclass
class CertSet:
    """A CA with host ``nimbus`` (127.0.0.1/localhost), users ``alice``, ``bob`` and ``admin``,
    an expired ``old`` user, and ``mallory`` from another CA (``foreign/``)."""
    dir: Path

    def cert(self, name: str) -> str:
        return str(self.dir / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.dir / f"{name}-key.pem")

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.pem")

    def client_conf(self, name: str) -> dict[str, str]:
        """storm.tls.* of a client that holds ``name``'s certificate (mallory: the foreign one)."""
        base = self.dir / "foreign" if name == "mallory" else self.dir
        return {"storm.tls.certfile": str(base / f"{name}.pem"), "storm.tls.keyfile": str(base / f"{name}-key.pem"),
                "storm.tls.cafile": self.ca}


def make_cert_set(directory: Path) -> CertSet:
    make_ca(directory)
    make_cert(directory, "nimbus", hosts=("127.0.0.1", "localhost"))
    for user in ("alice", "bob", "admin"):
        make_cert(directory, user)
    make_cert(directory, "old", days=1, not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))
    make_ca(directory / "foreign", "another CA")
    make_cert(directory / "foreign", "mallory")
    make_cert(directory / "foreign", "nimbus", hosts=("127.0.0.1", "localhost"))
    return CertSet(directory)


class FlippingRelay:
    """Forwards 127.0.0.1:<port> to ``target`` and parses the client's TLS records (5-byte
    headers). ``flip_record = n`` XORs one byte of the body of the n-th client record (counted
    from 0 over all connections) with 0x01: an on-path attacker altering that record.
    ``records`` lists (content type, length) of every client record seen."""

    def __init__(self, target: tuple[str, int], flip_record: int | None = None) -> None:
        self.target = target
        self.flip_record = flip_record
        self.records: list[tuple[int, int]] = []
        self.flipped = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._upstream, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    @staticmethod
    def _recv_exact(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def _upstream(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                header = self._recv_exact(src, 5)
                length = int.from_bytes(header[3:5], "big")
                body = bytearray(self._recv_exact(src, length))
                with self._lock:
                    index = len(self.records)
                    self.records.append((header[0], length))
                if index == self.flip_record and body:
                    body[len(body) // 2] ^= 0x01
                    self.flipped += 1
                dst.sendall(header + bytes(body))
        except OSError:
            pass
        finally:
            self._close(src, dst)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._close(src, dst)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._sock.close()
