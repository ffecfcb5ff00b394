"""Nimbus's Thrift server against idle, slow and memory-hungry peers (issue 10, item 3).

A real ThriftServer on a real port, serving a handler with one call: what is under test is
the transport (connection cap, idle and frame deadlines, buffered-bytes budget), not Nimbus.
"""
from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator

import pytest

from stormpy.client.nimbus_client import open_client
from stormpy.nimbus.server import ThriftServer
from stormpy.testing import free_port, wait_until


class ConfHandler:
    def getNimbusConf(self) -> str:  # noqa: N802 - the IDL's name
        return json.dumps({"ok": True})


@pytest.fixture
def idle_timeout_secs() -> float:
    """The server's idle timeout; a test may parametrize it."""
    return 1.0


@pytest.fixture
def server(idle_timeout_secs: float) -> Iterator[ThriftServer]:
    srv = ThriftServer(ConfHandler(), "127.0.0.1", free_port(), max_frame_bytes=1 << 20,
                       idle_timeout_secs=idle_timeout_secs, max_connections=8, max_buffered_bytes=1 << 20).start()
    try:
        yield srv
    finally:
        srv.stop("test done")


def _call(port: int) -> dict:
    client = open_client("127.0.0.1", port, timeout_secs=10)
    try:
        return json.loads(client.getNimbusConf())
    finally:
        client.close()


def _closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# Idle connections that outlive the calls: with the 1 s timeout the server could close them
# itself first, and then no eviction would be needed to make room.
@pytest.mark.parametrize("idle_timeout_secs", [10.0])
def test_idle_connections_at_the_cap_do_not_lock_clients_out(server: ThriftServer) -> None:
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
    try:
        wait_until(lambda: len(server._conns) == 8, 10, "8 idle connections registered")
        for _ in range(3):   # before: refused until the 300 s read timeout
            assert _call(server.port) == {"ok": True}
        assert server.evicted >= 1   # room was made by closing an idle one
    finally:
        for sock in idle:
            sock.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout(server: ThriftServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        assert _closed_by_server(sock, 15), "an idle connection was kept open"


def test_a_frame_that_trickles_in_is_closed_at_its_deadline(server: ThriftServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(struct.pack("!i", 1000))
        closed = False
        for _ in range(60):   # one byte every 0.5 s keeps each recv under the idle timeout
            try:
                sock.sendall(b"\x00")
            except OSError:
                closed = True
                break
            if _closed_by_server(sock, 0.5):
                closed = True
                break
        assert closed, "a frame sent at 2 bytes/s kept its connection for 30 s"


def test_unfinished_large_frames_share_a_bounded_budget(server: ThriftServer) -> None:
    first = socket.create_connection(("127.0.0.1", server.port))
    second = socket.create_connection(("127.0.0.1", server.port))
    try:
        first.sendall(struct.pack("!i", 900 * 1024) + b"\x80" * 10)
        wait_until(lambda: server.budget.used >= 900 * 1024, 10, "the first frame's reservation")
        second.sendall(struct.pack("!i", 900 * 1024) + b"\x80" * 10)
        assert _closed_by_server(second, 10), "a second unfinished frame beyond the budget was accepted"
        assert _call(server.port) == {"ok": True}   # small calls still served
    finally:
        first.close()
        second.close()
    wait_until(lambda: server.budget.used == 0, 10, "the budget released when the connection closed")
