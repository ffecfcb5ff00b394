"""Nimbus's Thrift side: the ``Nimbus`` service handler and a hardened framed-binary server.

``NimbusHandler`` maps each RPC of ``service Nimbus`` (idl/storm.thrift) onto ``core.Nimbus``
and builds the summaries (getClusterInfo, getTopologyInfo). ``ThriftServer`` speaks framed
binary Thrift, like Storm's clients expect, but does not trust its peers:
- a frame header larger than ``nimbus.thrift.max_buffer_size`` (or < 1) closes the
  connection before a byte of the frame is buffered, so a 2 GiB length costs nothing;
- frames are decoded from memory by the pure-Python binary protocol, so bogus string or
  container lengths inside a frame cannot allocate more than the frame itself;
- any error in a connection ends that connection only (logged at debug);
- a connection that sends nothing for ``nimbus.thrift.idle.timeout.secs`` (30 s), or whose
  frame does not complete by its deadline (idle timeout + 1 s per MiB), is closed: slow or
  idle peers cannot hold a thread and a slot for long;
- connections are capped (``nimbus.thrift.max.connections``); at the cap the connection idle
  the longest is closed to make room (a new one is refused only when all are busy), so idle
  sockets cannot lock clients out, and the accept loop never blocks;
- frames above 64 KiB reserve their size from a budget shared by all connections
  (``nimbus.thrift.max.buffered.bytes``) before a byte is buffered: many unfinished large
  frames cannot grow Nimbus's memory past it.
With ``storm.thrift.auth.secret.file`` set, a connection must pass the shared-secret
handshake (``stormpy.auth``) before its first frame; a plain Thrift client gets one
TApplicationException saying so, and a warning names it in the log.
With ``nimbus.thrift.tls.enable`` every connection is TLS (``stormpy.tls``; the shared-secret
handshake, when also set, runs inside it): a plaintext client or one whose certificate is not
from the CA fails the TLS handshake and is logged. With client certificates required the
certificate's CN is the caller's principal, and ``authz.AuthorizingHandler`` checks each call.
Threads: one accept thread ("nimbus-thrift"), one thread per connection.
"""
from __future__ import annotations

import json
import logging
import socket
import ssl
import struct
import threading
import time
from io import BytesIO
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from thriftpy2.protocol.binary import TBinaryProtocol  # pure Python: reads from our bounded frame
from thriftpy2.thrift import TApplicationException, TMessageType, TProcessor
from thriftpy2.transport import TMemoryBuffer, TTransportException

from stormpy import auth
from stormpy import config as cfg

from stormpy.nimbus import authz
from stormpy.nimbus import transitions as tr
from stormpy.nimbus.core import Nimbus, not_alive
from stormpy.streams import REQUIREMENTS_COMPONENT
from stormpy.thrift import storm
from stormpy.version import DAEMON_VERSION

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 256
IDLE_TIMEOUT_SECS = 30.0
MAX_BUFFERED_BYTES = 256 * 1024 * 1024
_UNBUDGETED_FRAME_BYTES = 64 * 1024     # small frames (every call but uploads) need no reservation
_FRAME_SECS_PER_MIB = 1.0               # a frame must arrive at 1 MiB/s or better after its header


class ByteBudget:
    """Bytes of unfinished frames all connections may buffer together; reservations never wait."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self.used -= n


class NimbusHandler:
    """Implements ``service Nimbus``; called on connection threads."""

    def __init__(self, nimbus: Nimbus, host_port: str, policy: authz.Policy | None = None) -> None:
        self.nimbus = nimbus
        self.files = nimbus.files
        self.host_port = host_port
        self.policy = policy or authz.Policy(nimbus.conf, enforce=False)

    def topology_acl(self, id_or_name: str) -> authz.TopologyAcl | None:
        """Owner and topology.users/groups of a living topology (None when there is none)."""
        topology_id = self.nimbus.find_id(id_or_name)
        base = self.nimbus.state.storm_base(topology_id) if topology_id is not None else None
        if base is None:
            return None
        try:
            conf = self.nimbus.topology_code(topology_id)[1]
        except Exception:  # noqa: BLE001 - code gone (being removed): only the owner and admins
            conf = {}
        return authz.TopologyAcl.from_conf(str(base.owner or ""), conf)

    # ------------------------------------------------------------ leadership (DESIGN section 14)
    def _leader_only(self, call: str) -> None:
        """Refuse a leader-only call on a standby (or a leader still recovering), naming the leader."""
        if self.nimbus.leader_ready and self.nimbus.state.is_leader():
            return
        leader = self.nimbus.state.leader()
        where = f"the leader is {leader}" if leader and leader != self.host_port else "no leader is elected yet"
        msg = (f"{call} refused: Nimbus {self.host_port} is not the leader; {where} "
               f"(clients follow the leader through nimbus.seeds)")
        if call in ("beginFileUpload", "uploadChunk", "finishFileUpload"):
            raise storm.IllegalStateException(msg=msg)
        raise TApplicationException(TApplicationException.INTERNAL_ERROR, msg)

    # ------------------------------------------------------------ topology lifecycle
    def submitTopology(self, name: str, uploadedJarLocation: str, jsonConf: str, topology: Any) -> None:
        self._leader_only("submitTopology")
        self.nimbus.submit(name, uploadedJarLocation, jsonConf, topology)

    def submitTopologyWithOpts(self, name: str, uploadedJarLocation: str, jsonConf: str, topology: Any,
                               options: Any) -> None:
        self._leader_only("submitTopologyWithOpts")
        status = options.initial_status if options is not None else storm.TopologyInitialStatus.ACTIVE
        self.nimbus.submit(name, uploadedJarLocation, jsonConf, topology, status)

    def killTopology(self, name: str) -> None:
        self._leader_only("killTopology")
        self.nimbus.kill(name, None)

    def killTopologyWithOpts(self, name: str, options: Any) -> None:
        self._leader_only("killTopologyWithOpts")
        self.nimbus.kill(name, options.wait_secs if options is not None else None)

    def activate(self, name: str) -> None:
        self._leader_only("activate")
        self.nimbus.user_action(name, tr.Event.ACTIVATE)

    def deactivate(self, name: str) -> None:
        self._leader_only("deactivate")
        self.nimbus.user_action(name, tr.Event.DEACTIVATE)

    def rebalance(self, name: str, options: Any) -> None:
        self._leader_only("rebalance")
        self.nimbus.rebalance(name, options or storm.RebalanceOptions())

    # ------------------------------------------------------------ files
    def _recovering(self) -> bool:
        """This Nimbus asks supervisors for missing code (ha.CodeRecovery): uploads are welcome
        even on a standby, and only those matching a recorded digest are kept there."""
        recovery = self.nimbus.recovery
        return recovery is not None and recovery.wants_uploads()

    def beginFileUpload(self) -> str:
        if not self._recovering():
            self._leader_only("beginFileUpload")
        return self.files.begin_upload()

    def uploadChunk(self, location: str, chunk: bytes) -> None:
        if not self._recovering():
            self._leader_only("uploadChunk")
        self.files.upload_chunk(location, chunk if isinstance(chunk, bytes) else bytes(chunk or b""))

    def finishFileUpload(self, location: str) -> None:
        recovering = self._recovering()
        if not recovering:
            self._leader_only("finishFileUpload")
        digest = self.files.finish_upload(location)
        if recovering and self.nimbus.recovery.offer(Path(location), digest):
            return
        if not (self.nimbus.leader_ready and self.nimbus.state.is_leader()):
            self.files.discard_upload(location)   # a standby keeps only code it asked for
            self._leader_only("finishFileUpload")

    def beginFileDownload(self, file: str) -> str:
        return self.files.begin_download(file)

    def downloadChunk(self, id: str) -> bytes:  # noqa: A002 - the IDL's parameter name
        return self.files.download_chunk(id)

    # ------------------------------------------------------------ reads
    def getNimbusConf(self) -> str:
        return json.dumps(cfg.redacted(self.nimbus.conf), sort_keys=True)

    def getTopologyConf(self, id: str) -> str:  # noqa: A002
        topology_id = self._existing_id(id)
        conf = self.files.read_conf_json(topology_id)
        if conf is None:
            raise storm.NotAliveException(
                msg=f"the code of topology {id!r} is missing on Nimbus {self.host_port} (CODE MISSING: it is "
                    "kept and its code is being recovered from the supervisors; see `stormpy list`)")
        conf = self._with_rebalanced_workers(topology_id, conf)
        return conf if self._caller_sees_credentials(topology_id) else _redacted_json(conf)

    def _caller_sees_credentials(self, topology_id: str) -> bool:
        """With client certificates (``authz.Policy.enforce``): admins, daemons and the
        topology's owner. Otherwise stormpy has one identity (DESIGN 13): whoever holds the
        shared secret. With storm.thrift.auth.secret.file set, this Nimbus's ThriftServer only
        serves connections that proved they hold it; without it every caller is anonymous (not
        the admin), and credential-looking values (``config.redacted``) are replaced."""
        if self.policy.enforce:
            caller = authz.current_caller()
            acl = self.topology_acl(topology_id)
            return self.policy.may_read_all(caller) or (
                caller is not None and acl is not None and caller.principal == acl.owner)
        return bool(self.nimbus.conf.get(cfg.STORM_THRIFT_AUTH_SECRET_FILE.name))

    def _with_rebalanced_workers(self, topology_id: str, conf_json: str) -> str:
        """The stored conf is the one submitted; ``rebalance -n`` changes the StormBase's worker
        count, which is what runs: show that as ``topology.workers``."""
        base = self.nimbus.state.storm_base(topology_id)
        if base is None or not base.num_workers:
            return conf_json
        try:
            conf = json.loads(conf_json)
        except ValueError:
            return conf_json
        if not isinstance(conf, dict) or conf.get(cfg.TOPOLOGY_WORKERS.name) == base.num_workers:
            return conf_json
        conf[cfg.TOPOLOGY_WORKERS.name] = base.num_workers
        return json.dumps(conf)

    def getTopology(self, id: str) -> Any:  # noqa: A002
        return self.nimbus.topology_code(self._existing_id(id))[0]

    def getUserTopology(self, id: str) -> Any:  # noqa: A002
        return self.nimbus.topology_code(self._existing_id(id))[0]

    def _existing_id(self, id_or_name: str) -> str:
        topology_id = self.nimbus.find_id(id_or_name)
        if topology_id is None:
            raise not_alive(id_or_name)
        return topology_id

    # ------------------------------------------------------------ Storm 1.1+ calls (streamparse's sparse)
    def isTopologyNameAllowed(self, name: str) -> bool:
        """A valid name no living topology uses (what submit would accept)."""
        from stormpy.topology import pipeline

        try:
            pipeline.check_name(name)
        except storm.InvalidTopologyException:
            return False
        return self.nimbus.find_id(name) is None

    def getLeader(self) -> Any:
        """The NimbusSummary of the Nimbus holding ``/leader-lock`` (``isLeader``); when nobody
        holds it, this Nimbus's own summary with ``isLeader`` false (clients then try other seeds)."""
        leader = self.nimbus.state.leader()
        if leader == self.host_port and not (self.nimbus.leader_ready and self.nimbus.state.is_leader()):
            leader = None   # our own previous incarnation's stale lock (or recovery not done): no leader yet
        if leader is not None:
            for summary in self.getClusterInfo().nimbuses or []:
                if f"{summary.host}:{summary.port}" == leader:
                    return summary
            host, _, port = leader.rpartition(":")
            return storm.NimbusSummary(host=host, port=int(port or 0), isLeader=True, version="", uptime_secs=0)
        host, _, port = self.host_port.rpartition(":")
        return storm.NimbusSummary(host=host, port=int(port or 0), isLeader=False, version=DAEMON_VERSION,
                                   uptime_secs=self.nimbus.now_secs() - self.nimbus.started_secs)

    def getTopologyPageInfo(self, id: str, window: str, is_include_sys: bool) -> Any:  # noqa: A002
        topology_id = self._existing_id(id)
        base = self.nimbus.state.storm_base(topology_id)
        if base is None:
            raise not_alive(id)
        summary = self._topology_summary(topology_id, base, self.nimbus.state.assignment(topology_id),
                                         self.nimbus.now_secs(), self._code_problems([topology_id]))
        try:
            conf = self.getTopologyConf(topology_id)
        except storm.NotAliveException:
            conf = None    # its code is missing here: the page still shows why
        return storm.TopologyPageInfo(id=topology_id, name=summary.name, uptime_secs=summary.uptime_secs,
                                      status=summary.status, num_tasks=summary.num_tasks,
                                      num_workers=summary.num_workers, num_executors=summary.num_executors,
                                      topology_conf=conf, owner=base.owner or "",
                                      sched_status=summary.sched_status)

    def _code_problems(self, topology_ids: list[str]) -> dict[str, str]:
        """topology id -> why it is not fully served: its code missing on this Nimbus, or a
        supervisor refusing its code archive (``TopologySummary.sched_status``, Storm's field)."""
        problems = {}
        for topology_id in self.nimbus.missing_code(topology_ids):
            problems[topology_id] = (f"CODE MISSING on Nimbus {self.host_port}: topology kept, workers keep "
                                     "running; waiting for a supervisor's copy (or an operator)")
        failures = self.nimbus.state.code_failures() if topology_ids else {}
        for topology_id in topology_ids:
            if topology_id in failures:
                text = "; ".join(failures[topology_id])
                problems[topology_id] = f"{problems[topology_id]}; {text}" if topology_id in problems else text
        return problems

    def getComponentPageInfo(self, topology_id: str, component_id: str, window: str, is_include_sys: bool) -> Any:
        info = self.getTopologyInfo(topology_id)
        plan = self.nimbus.plan(info.id, self.nimbus.state.storm_base(info.id))
        comp = plan.components.get(component_id)
        if comp is None:
            raise not_alive(f"{topology_id} has no component {component_id!r}")
        executors = [e for e in info.executors if e.component_id == component_id]
        kind = storm.ComponentType.SPOUT if comp.kind == "spout" else storm.ComponentType.BOLT
        return storm.ComponentPageInfo(component_id=component_id, component_type=kind, topology_id=info.id,
                                       topology_name=info.name, num_executors=len(executors),
                                       num_tasks=len(comp.tasks), errors=list((info.errors or {}).get(component_id, [])),
                                       topology_status=info.status)

    def getClusterInfo(self) -> Any:
        state, now = self.nimbus.state, self.nimbus.now_secs()
        assignments = state.assignments()
        used: dict[str, set[int]] = {}
        for assignment in assignments.values():
            for node_info in (assignment.executor_node_port or {}).values():
                used.setdefault(node_info.node, set()).update(int(p) for p in node_info.port)
        supervisors = [
            storm.SupervisorSummary(host=info.hostname, uptime_secs=int(info.uptime_secs or 0),
                                    num_workers=len(info.meta or []), num_used_workers=len(used.get(sid, ())),
                                    supervisor_id=sid, version=info.version,
                                    logviewer_port=info.logviewer_port)
            for sid, info in sorted(state.supervisors().items())]
        topologies = []
        bases = state.storm_bases()
        problems = self._code_problems(sorted(bases))
        for topology_id, base in sorted(bases.items()):
            assignment = assignments.get(topology_id)
            topologies.append(self._topology_summary(topology_id, base, assignment, now, problems))
        leader = state.leader()   # the lock holder, not the registrations' (possibly stale) flags
        nimbuses = [storm.NimbusSummary(host=hp.rpartition(":")[0], port=int(hp.rpartition(":")[2] or 0),
                                        uptime_secs=now - self.nimbus.started_secs if hp == self.host_port
                                        else info.uptime_secs, isLeader=hp == leader, version=info.version)
                    for hp, info in sorted(state.nimbuses().items())]
        return storm.ClusterSummary(supervisors=supervisors, nimbus_uptime_secs=now - self.nimbus.started_secs,
                                    topologies=topologies, nimbuses=nimbuses)

    def _topology_summary(self, topology_id: str, base: Any, assignment: Any, now: int,
                          problems: dict[str, str] | None = None) -> Any:
        executors = (assignment.executor_node_port or {}) if assignment else {}
        slots = {(ni.node, p) for ni in executors.values() for p in ni.port}
        num_tasks = sum(info.task_end - info.task_start + 1 for info in executors)
        return storm.TopologySummary(id=topology_id, name=base.name, num_tasks=num_tasks,
                                     num_executors=len(executors), num_workers=len(slots),
                                     uptime_secs=max(0, now - int(base.launch_time_secs or now)),
                                     status=tr.Status(base.status).name, owner=base.owner,
                                     sched_status=self._sched_status(topology_id, problems))

    def _sched_status(self, topology_id: str, problems: Mapping[str, str] | None) -> str | None:
        """Storm's sched_status: the code problems Nimbus knows of (missing on Nimbus, an archive a
        supervisor refuses) and the newest requirements failure a supervisor reported (cleared
        when its install succeeds), joined."""
        found = [(problems or {}).get(topology_id)]
        errors = self.nimbus.state.component_errors(topology_id, REQUIREMENTS_COMPONENT)
        found.append(errors[0].error if errors else None)
        return "; ".join(text for text in found if text) or None

    def getTopologyInfo(self, id: str) -> Any:  # noqa: A002
        topology_id = self._existing_id(id)
        state, now = self.nimbus.state, self.nimbus.now_secs()
        base = state.storm_base(topology_id)
        if base is None:
            raise not_alive(id)
        try:
            task_component = self.nimbus.plan(topology_id, base).task_component
        except storm.NotAliveException:   # code missing here (CodeRecovery): still show workers and errors
            task_component = {}
        assignment = state.assignment(topology_id)
        beats = state.worker_heartbeats(topology_id)
        summaries = []
        executors = (assignment.executor_node_port or {}) if assignment else {}
        starts = (assignment.executor_start_time_secs or {}) if assignment else {}
        for info, node_info in sorted(executors.items(), key=lambda kv: kv[0].task_start):
            port = min(int(p) for p in node_info.port)
            beat = beats.get((node_info.node, port))
            stats = (beat.executor_stats or {}).get(info) if beat else None
            uptime = int(beat.uptime_secs) if beat else max(0, now - int(starts.get(info, now)))
            summaries.append(storm.ExecutorSummary(
                executor_info=info, component_id=task_component.get(info.task_start, "?"),
                host=assignment.node_host.get(node_info.node, node_info.node), port=port,
                uptime_secs=uptime, stats=stats))
        return storm.TopologyInfo(id=topology_id, name=base.name,
                                  uptime_secs=max(0, now - int(base.launch_time_secs or now)),
                                  executors=summaries, status=tr.Status(base.status).name,
                                  errors=state.errors(topology_id), sched_status=self._sched_status(topology_id, self._code_problems([topology_id])))


# ---------------------------------------------------------------- transport
class FrameTooLarge(TTransportException):
    pass


class BoundedFramedTransport:
    """Server-side framed transport: reads one whole frame (bounded) into memory, writes framed."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int, idle_timeout_secs: float = IDLE_TIMEOUT_SECS,
                 budget: ByteBudget | None = None) -> None:
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_secs = idle_timeout_secs
        self.budget = budget
        self._reserved = 0
        self._rbuf = BytesIO()
        self._wbuf = BytesIO()
        self._may_start_frame = True
        self.busy = False                   # between a complete frame and the reply being sent
        self.last_active = time.monotonic()

    def begin_message(self) -> None:
        """Called before each request: only now may a new frame be read (one message per frame)."""
        self._may_start_frame = True
        self._release()
        self.busy = False
        self.last_active = time.monotonic()

    def _release(self) -> None:
        if self._reserved and self.budget is not None:
            self.budget.release(self._reserved)
        self._reserved = 0

    def _read_exact(self, size: int, deadline: float) -> bytes:
        chunks, remaining = [], size
        while remaining:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TTransportException(TTransportException.TIMED_OUT,
                                          f"frame not complete in time ({size - remaining} of {size} bytes)")
            self.sock.settimeout(min(self.idle_timeout_secs, left))
            data = self.sock.recv(min(remaining, 1 << 16))
            if not data:
                raise TTransportException(TTransportException.END_OF_FILE, "peer closed the connection")
            chunks.append(data)
            remaining -= len(data)
        return b"".join(chunks)

    def read(self, size: int) -> bytes:
        data = self._rbuf.read(size)
        if data or size == 0:
            return data
        if not self._may_start_frame:
            # A message claims more bytes than its frame holds: garbage, not a reason to wait.
            raise TTransportException(TTransportException.UNKNOWN, "message longer than its frame")
        self._may_start_frame = False
        (frame_size,) = struct.unpack("!i", self._read_exact(4, time.monotonic() + self.idle_timeout_secs))
        if frame_size < 1 or frame_size > self.max_frame_bytes:
            raise FrameTooLarge(TTransportException.UNKNOWN,
                                f"frame of {frame_size} bytes refused (limit nimbus.thrift.max_buffer_size="
                                f"{self.max_frame_bytes})")
        if frame_size > _UNBUDGETED_FRAME_BYTES and self.budget is not None:
            if not self.budget.reserve(frame_size):
                raise FrameTooLarge(TTransportException.UNKNOWN,
                                    f"frame of {frame_size} bytes refused: Nimbus already buffers "
                                    f"{self.budget.used} bytes of unfinished frames "
                                    f"(nimbus.thrift.max.buffered.bytes={self.budget.limit})")
            self._reserved = frame_size
        self.last_active = time.monotonic()
        deadline = self.last_active + self.idle_timeout_secs + _FRAME_SECS_PER_MIB * frame_size / (1 << 20)
        self._rbuf = BytesIO(self._read_exact(frame_size, deadline))
        self.busy = True
        return self._rbuf.read(size)

    def write(self, data: bytes) -> None:
        self._wbuf.write(data)

    def flush(self) -> None:
        out, self._wbuf = self._wbuf.getvalue(), BytesIO()
        self.sock.sendall(struct.pack("!i", len(out)) + out)

    def close(self) -> None:
        self._release()
        try:
            self.sock.close()
        except OSError:
            pass

    def evict(self) -> None:
        """From another thread: wake this connection's blocked read so its thread ends."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class SafeProcessor(TProcessor):
    """A TProcessor whose undeclared handler errors become TApplicationException replies."""

    def process(self, iprot: Any, oprot: Any) -> None:
        iprot.trans.begin_message()
        api, seqid, result, call = self.process_in(iprot)
        if isinstance(result, TApplicationException):
            return self.send_exception(oprot, api, result, seqid)
        try:
            result.success = call()
        except TApplicationException as exc:
            return self.send_exception(oprot, api, exc, seqid)
        except Exception as exc:
            if not self.handle_exception(exc, result):
                log.exception("Nimbus %s failed", api)
                return self.send_exception(oprot, api, TApplicationException(
                    TApplicationException.INTERNAL_ERROR, f"{api} failed on Nimbus: {type(exc).__name__}: {exc}"),
                    seqid)
        if not result.oneway:
            self.send_result(oprot, api, result, seqid)


class ThriftServer:
    """Accepts connections on host:port and serves ``handler`` over bounded framed binary."""

    def __init__(self, handler: Any, host: str, port: int, max_frame_bytes: int,
                 idle_timeout_secs: float = IDLE_TIMEOUT_SECS, max_connections: int = MAX_CONNECTIONS,
                 max_buffered_bytes: int = MAX_BUFFERED_BYTES, secret: bytes | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        policy = getattr(handler, "policy", None)
        if policy is not None and policy.enforce:
            handler = authz.AuthorizingHandler(handler, policy, handler.topology_acl)
        self.processor = SafeProcessor(storm.Nimbus, handler)
        self.secret = secret       # shared secret: the auth handshake is required when set
        self.tls = tls             # server TLS context: every connection is TLS when set
        self.host, self.port = host, port
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_secs = max(0.1, float(idle_timeout_secs))
        self.max_connections = max(1, int(max_connections))
        self.budget = ByteBudget(max(int(max_buffered_bytes), max_frame_bytes))
        self._conns: dict[int, BoundedFramedTransport] = {}
        self._conns_lock = threading.Lock()
        self.evicted = 0
        self.refused = 0
        self._stopped = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._accept_loop, name="nimbus-thrift", daemon=True)

    def bind(self) -> "ThriftServer":
        """Hold the port (connections queue) without serving yet; ``start`` serves."""
        if self._sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, self.port))
            except OSError:
                sock.close()
                raise
            sock.listen(128)
            sock.settimeout(0.5)
            self._sock = sock
        return self

    def start(self) -> "ThriftServer":
        self.bind()
        self._thread.start()
        log.info("Nimbus Thrift server listening on %s:%d", self.host, self.port)
        return self

    def stop(self, reason: str) -> None:
        """Stop accepting connections; open ones end after their current call."""
        log.info("Nimbus Thrift server on port %d stopping: %s", self.port, reason)
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopped.is_set():
            try:
                conn, peer = self._sock.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                if not self._stopped.is_set():
                    log.warning("accept failed: %s", exc)
                continue
            trans = BoundedFramedTransport(conn, self.max_frame_bytes, self.idle_timeout_secs, self.budget)
            if not self._admit(trans, peer):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(trans, peer), name=f"nimbus-conn-{peer[1]}",
                             daemon=True).start()

    def _admit(self, trans: BoundedFramedTransport, peer: Any) -> bool:
        """Register a new connection; at the cap, close the longest-idle one or refuse this one."""
        with self._conns_lock:
            if len(self._conns) >= self.max_connections:
                idle = [t for t in self._conns.values() if not t.busy]
                if not idle:
                    self.refused += 1
                    log.warning("refusing connection from %s: %d connections open and all busy",
                                peer, len(self._conns))
                    return False
                victim = min(idle, key=lambda t: t.last_active)
                del self._conns[id(victim)]
                self.evicted += 1
                if self.evicted <= 10 or self.evicted % 100 == 0:
                    log.warning("%d Thrift connections open (nimbus.thrift.max.connections): closing the "
                                "one idle longest (%.1fs) for %s (%d closed so far)", self.max_connections,
                                time.monotonic() - victim.last_active, peer, self.evicted)
                victim.evict()
            self._conns[id(trans)] = trans
            return True

    def _authenticate(self, trans: BoundedFramedTransport, peer: Any) -> bool:
        """The shared-secret handshake; a plain Thrift client gets one clear exception."""
        sock = trans.sock
        sock.settimeout(min(self.idle_timeout_secs, auth.HANDSHAKE_TIMEOUT_SECS))
        try:
            first = trans._read_exact(4, time.monotonic() + auth.HANDSHAKE_TIMEOUT_SECS)
            if first == auth.MAGIC:
                assert self.secret is not None
                auth.server_handshake(sock, self.secret, first)
                return True
            self._refuse_unauthenticated(trans, peer, struct.unpack("!i", first)[0])
        except auth.AuthError as exc:
            log.warning("refused Thrift connection from %s: %s", peer, exc)
        except (TTransportException, OSError) as exc:
            log.debug("connection from %s closed during authentication: %s", peer, exc)
        return False

    def _refuse_unauthenticated(self, trans: BoundedFramedTransport, peer: Any, frame_size: int) -> None:
        name, seqid = "?", 0
        if 0 < frame_size <= _UNBUDGETED_FRAME_BYTES:
            frame = trans._read_exact(frame_size, time.monotonic() + auth.HANDSHAKE_TIMEOUT_SECS)
            try:
                name, _type, seqid = TBinaryProtocol(TMemoryBuffer(frame), strict_read=True,
                                                     decode_response=True).read_message_begin()
            except Exception:  # noqa: BLE001 - not Thrift at all: no answer is owed
                log.warning("refused an unauthenticated connection from %s (not Thrift)", peer)
                return
        log.warning("refused an unauthenticated Thrift client from %s (it called %s): "
                    "storm.thrift.auth.secret.file is set on this Nimbus", peer, name)
        if frame_size > _UNBUDGETED_FRAME_BYTES:
            return
        out = TMemoryBuffer()
        proto = TBinaryProtocol(out)
        proto.write_message_begin(name, TMessageType.EXCEPTION, seqid)
        TApplicationException(TApplicationException.UNKNOWN,
                              "authentication required: this Nimbus needs the shared secret "
                              "(set storm.thrift.auth.secret.file in the client's config)").write(proto)
        proto.write_message_end()
        data = out.getvalue()
        trans.sock.sendall(struct.pack("!i", len(data)) + data)

    def _start_tls(self, trans: BoundedFramedTransport, peer: Any) -> bool:
        """The TLS handshake (on the connection's thread, bounded); the caller's principal from
        its certificate. A plaintext client, a foreign CA or an expired certificate fails here."""
        assert self.tls is not None
        raw = trans.sock
        raw.settimeout(min(self.idle_timeout_secs, auth.HANDSHAKE_TIMEOUT_SECS))
        try:
            conn = self.tls.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.warning("refused a Thrift connection from %s: TLS handshake failed: %s", peer, exc)
            return False
        trans.sock = conn
        principal, groups = tls_principal(conn)
        authz.set_caller(authz.Caller(principal, groups))
        return True

    def _serve(self, trans: BoundedFramedTransport, peer: Any) -> None:
        authz.set_caller(None)
        try:
            if self.tls is not None and not self._start_tls(trans, peer):
                return
            if self.secret is not None and not self._authenticate(trans, peer):
                return
            proto = TBinaryProtocol(trans, strict_read=True, decode_response=True)
            while not self._stopped.is_set():
                self.processor.process(proto, proto)
        except FrameTooLarge as exc:
            log.warning("closing connection from %s: %s", peer, exc.message)
        except ssl.SSLError as exc:   # after the handshake: a record that fails its MAC was altered on the way
            log.warning("closing TLS connection from %s: %s (altered or truncated on the way?)", peer, exc)
        except (TTransportException, OSError) as exc:
            log.debug("connection from %s closed: %s", peer, exc)
        except Exception as exc:  # garbage on the wire: drop this peer only
            log.warning("closing connection from %s after a malformed request: %s: %s", peer,
                        type(exc).__name__, exc)
        finally:
            trans.close()
            with self._conns_lock:
                self._conns.pop(id(trans), None)


def tls_principal(conn: ssl.SSLSocket) -> tuple[str | None, tuple[str, ...]]:
    from stormpy.tls import peer_principal

    return peer_principal(conn)


def _redacted_json(conf_json: str) -> str:
    try:
        conf = json.loads(conf_json)
    except ValueError:
        return conf_json
    return json.dumps(cfg.redacted(conf), sort_keys=True) if isinstance(conf, dict) else conf_json


def nimbus_summary(host: str, port: int, uptime_secs: int, is_leader: bool) -> Any:
    """The NimbusSummary registered under /nimbuses."""
    return storm.NimbusSummary(host=host, port=port, uptime_secs=uptime_secs, isLeader=is_leader, version=DAEMON_VERSION)
