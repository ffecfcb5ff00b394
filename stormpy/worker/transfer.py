"""ZeroMQ transport between worker processes (DESIGN section 5, "Transport").

One PULL socket per worker, bound on the worker's port, receives frames from every peer. A
frame is ``msgpack([envelope, ...])``, one envelope per destination task id (the "virtual
port") whose messages the receive thread hands to ``runtime.receive(task, messages)``. A batch
travels as columns, ``[dest_task, runs, values, anchors]`` (stream and source run-length
encoded, checked per run: ``stormpy.worker.wire``); control messages and batches that do not
fit the columns as ``[dest_task, [message, ...]]``. Tasks of this worker never touch a
socket: ``send`` delivers them straight to the runtime.

Threads:
- executor threads call :meth:`ZmqTransfer.send` with a batch for one destination task; remote
  batches go on a ``SimpleQueue`` (zmq sockets are not thread-safe, queue.Queue is slow). The
  executor loop (``topology.executor.threads: one``) packs each round's remote batches itself,
  one frame per peer, and hands the frames over in one item (:meth:`ZmqTransfer.send_many`),
  so the send thread wakes once per round and touches no message;
- the *send thread* owns one PUSH socket per peer worker. It drains everything queued, groups
  the batches per peer and sends one frame per peer per round, so batching grows with load
  while a lone tuple leaves at once (light traffic is never held back by a timer). It also
  applies route changes (assignment moved a task) and runs the backpressure check;
- the *receive thread* owns the PULL socket and hands each frame to the receive door
  (``stormpy.worker.door``): garbage frames are counted, logged and dropped; so are single
  messages of the wrong shape, with the claimed sender named in a rate-limited warning and an
  error report. The socket refuses frames above
  ``storm.messaging.max.message.bytes`` (ZeroMQ MAXMSGSIZE drops the connection before
  buffering them); frames are split below that size where they are packed.

With ``curve`` keys (``storm.messaging.curve.enable``, keys from ``stormpy.auth.curve_keys``)
every socket speaks ZeroMQ CURVE: traffic is encrypted, the receive socket is a CURVE server
whose authenticator (ZAP) admits only the topology's key, and a peer without the keys (plain
ZeroMQ, or CURVE with another key) is refused during the handshake, logged and counted.

Backpressure: every few milliseconds the send thread checks whether this worker's own receive
queues are over their high watermark (the executors' ``overloaded`` flags) and tells every peer
when that changes, and again each second while it lasts. A worker throttles its spouts
(``runtime.set_remote_backpressure``) while any peer, its own send queue or a slow peer socket
is overloaded. A peer's signal expires when not refreshed, so a dead worker cannot stall a
topology forever. A backpressure frame is ``[backpressure, host, port, on, token]``: with a
``control_token`` (``topology.worker.control.token``, which Nimbus puts in the topology's config
at submit) only frames carrying that token and naming a worker of the current assignment are
obeyed; others (a process outside the topology, with CURVE off) are refused, counted and logged
at a rate-limited WARNING, so they stop nothing.

Frames arrive as msgpack with ``use_list=False``: messages are tuples, as the contract says, and
so are their values.

Both threads run under a :class:`~stormpy.daemon_guard.ThreadGuard` (the worker's): an exception
is reported and the loop restarted. Registered serializers are user code: one that raises, on
either side, costs only its tuples (dropped, reported as the sender's error, their trees failed
through the acker so the spout replays them). They run on the executor loop's thread (its
rounds), the send thread (batches of executors on threads of their own) and the receive thread,
so they must be safe to call from several threads at once. The error counters are written by
those threads without a lock: they may miss a count when two threads fail at the same moment.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgpack
import zmq

from stormpy.daemon_guard import ThreadGuard
from stormpy.streams import ACK_FAIL, ACKER_STREAMS
from stormpy.worker import wire
from stormpy.worker.door import CONTROL_TASK, DeliveryError, ReceiveDoor

log = logging.getLogger(__name__)

BACKPRESSURE = "backpressure"

Address = tuple[str, int]


class Receiver(Protocol):
    """What the transport needs from a ``WorkerRuntime``."""

    local_tasks: set[int]

    def receive(self, task_id: int, messages: list) -> None: ...

    def is_locally_overloaded(self) -> bool:
        """Whether this worker's OWN receivers are over their high watermark.

        Not ``is_overloaded()``, which is also true while a *remote* worker signalled
        backpressure: telling peers that would echo the signal back and forth and latch every
        spout off.
        """
        ...

    def set_remote_backpressure(self, on: bool) -> None: ...


class _Routes:
    """An immutable task -> peer address map, swapped whole by :meth:`ZmqTransfer.update_routes`."""

    def __init__(self, task_addr: Mapping[int, Address]) -> None:
        self.task_addr = dict(task_addr)
        self.peers = set(self.task_addr.values())


#: (peer address, its frames, how many messages they carry)
_PeerFrames = tuple[Address, list[bytes], int]


class _Frames:
    """A round of the executor loop packed on its thread (:meth:`ZmqTransfer.send_many`):
    frames per peer and how many batches they carry (``is_backlogged`` counts batches)."""

    __slots__ = ("frames", "batches")

    def __init__(self, frames: list[_PeerFrames], batches: int) -> None:
        self.frames = frames
        self.batches = batches


class _Peer:
    """One PUSH socket to a peer worker plus frames that could not be sent yet (send thread only)."""

    def __init__(self, ctx: zmq.Context, addr: Address, hwm: int, curve: tuple[bytes, bytes] | None = None) -> None:
        self.addr = addr
        self.socket = ctx.socket(zmq.PUSH)
        if curve is not None:
            public, secret = curve
            self.socket.curve_serverkey = public
            self.socket.curve_publickey = public
            self.socket.curve_secretkey = secret
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, hwm)
        self.socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self.socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.socket.connect(f"tcp://{addr[0]}:{addr[1]}")
        self.pending: deque[bytes] = deque()

    def close(self, linger_ms: int = 0) -> None:
        self.socket.close(linger=linger_ms)


class ZmqTransfer:
    """The worker's tuple transport; ``send`` is called by executor threads (see module doc)."""

    def __init__(self, host: str, port: int, *, bind_host: str = "*", hwm_frames: int = 100,
                 max_pending_frames: int = 400, overload_backlog: int = 2000,
                 backpressure_refresh_secs: float = 1.0, backpressure_expire_secs: float = 4.0,
                 check_interval_secs: float = 0.005,
                 report_error: Callable[[int, str], None] | None = None,
                 serialization: Any = None, max_message_bytes: int = 8 * 1024 * 1024,
                 curve: tuple[bytes, bytes] | None = None, guard: ThreadGuard | None = None,
                 acker_tasks: list[int] | None = None, control_token: str | None = None) -> None:
        self.host = host
        self.port = port
        self.me: Address = (host, port)
        self._bind_host = bind_host
        self._hwm = hwm_frames
        self._max_pending = max_pending_frames
        self._overload_backlog = overload_backlog
        self._bp_refresh = backpressure_refresh_secs
        self._bp_expire = backpressure_expire_secs
        self._check_interval = check_interval_secs
        self._max_drain = 1000           # batches per frame round of the send thread
        self._batches_per_item = 1.0     # batches per outbox item in the last round (send_many)
        # storm.messaging.max.message.bytes: the receive socket refuses larger frames (ZeroMQ
        # drops the connection), so the sender splits its frames below it.
        self._max_bytes = max(1024, int(max_message_bytes))
        self._curve = curve
        self._authenticator: Any = None
        self._report_error = report_error
        # Runs the send and receive threads: an exception is reported and the loop restarted
        # (the worker's guard ends the worker when that keeps happening).
        self._guard = guard if guard is not None else ThreadGuard(f"transfer {port}")
        # Tuples that cannot be serialized are failed at once through these (root % n).
        self._acker_tasks = list(acker_tasks or [])
        self._control_token = control_token
        # stormpy.serialization.Serialization when topology.serializers registers types, else
        # None: plain msgpack, whose tuple-returning decoder is the fast path.
        self._serialization = serialization
        self._ctx = zmq.Context()
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._packers = threading.local()   # send_many's packer of each calling thread
        self._routes = _Routes({})
        self._runtime: Receiver | None = None
        self._door: ReceiveDoor | None = None   # the receive thread's, made by start()
        self._local: set[int] | frozenset[int] = frozenset()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pull: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._peers: dict[Address, _Peer] = {}
        self._remote_bp: dict[Address, float] = {}   # peer -> monotonic time of its last "on"
        self._bp_sent_state = False
        self._bp_sent_at = 0.0
        self._throttled = False
        self.counters = {"sent_frames": 0, "sent_messages": 0, "received_frames": 0,
                         "received_messages": 0, "dropped_messages": 0, "bad_frames": 0,
                         "unroutable_messages": 0, "bad_messages": 0, "oversized_messages": 0,
                         "peer_disconnects": 0, "refused_handshakes": 0,
                         "failed_trees": 0, "refused_control": 0}

    @property
    def encrypted(self) -> bool:
        """Whether peers must hold the topology's CURVE keys (outsiders are refused)."""
        return self._curve is not None

    # ------------------------------------------------------------ lifecycle

    def bind(self) -> None:
        """Bind the receiving socket now, so a port clash fails the worker before it starts."""
        if self._pull is not None:
            return
        pull = self._ctx.socket(zmq.PULL)
        if self._curve is not None:
            self._start_authenticator()
            pull.curve_server = True
            pull.curve_secretkey = self._curve[1]
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.RCVHWM, self._hwm)
        pull.setsockopt(zmq.MAXMSGSIZE, self._max_bytes)
        pull.bind(f"tcp://{self._bind_host}:{self.port}")
        self._pull = pull

    def start(self, runtime: Receiver) -> None:
        """Start delivering to ``runtime``; call after the runtime exists (it needs this object)."""
        self._runtime = runtime
        self._local = runtime.local_tasks
        self._door = ReceiveDoor(runtime.receive, counters=self.counters, report=self._report,
                                 fail_trees=self._fail_trees, control={BACKPRESSURE: self._on_backpressure},
                                 serialization=self._serialization)
        self.bind()
        for name, target in (("transfer-send", self._send_loop), ("transfer-recv", self._recv_loop)):
            self._threads.append(self._guard.start_thread(f"{name}-{self.port}", target))
        log.info("transfer: listening on port %d", self.port)

    def stop(self, reason: str, timeout_secs: float = 5.0) -> None:
        """Flush what is queued (bounded by ``timeout_secs``), stop both threads, close sockets."""
        log.info("transfer: stopping port %d: %s", self.port, reason)
        self._outbox.put(_STOP)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_secs)
            if thread.is_alive():
                log.warning("transfer: thread %s did not stop within %.1fs", thread.name, timeout_secs)
        self._threads.clear()
        if self._authenticator is not None:
            self._authenticator.stop()
        self._ctx.destroy(linger=0)
        log.info("transfer: stopped (%s)", self.counters)

    # ------------------------------------------------------------ called by executor threads

    def send(self, task_id: int, messages: list) -> None:
        """Deliver a batch for ``task_id``: to the runtime when local, else via the send thread."""
        if task_id in self._local:
            self._runtime.receive(task_id, messages)  # type: ignore[union-attr]
            return
        self._outbox.put((task_id, messages))

    def send_many(self, batches: list[tuple[int, list]]) -> None:
        """``send`` for what a round of the executor loop emitted for other workers: packed
        here, on the loop's thread, into one frame per peer; the send thread gets the frames in
        one queue operation (one wake-up) and only writes them to the sockets.

        Why on the loop's thread: the messages were made there moments ago and are still in the
        core's caches; packed by the send thread a switch interval later, their reads and frees
        missed the caches (the cluster word count, compiled, alternating runs: 1.01M against
        0.88M counted words/s, four pairs). A batch for a task of this worker is delivered
        at once (``_route``)."""
        packer = getattr(self._packers, "packer", None)
        if packer is None:   # msgpack packers are not thread-safe: one per calling thread
            packer = self._packers.packer = self._new_packer()
        routed: dict[Address, list] = {}
        for batch in batches:
            self._route(batch, routed)
        frames = self._frames(routed, packer)
        if frames:
            self._outbox.put(_Frames(frames, len(batches)))

    # ------------------------------------------------------------ called by the worker

    def update_routes(self, task_addr: Mapping[int, Address]) -> None:
        """Install a new task -> (host, port) map after an assignment change (any thread).

        The send thread opens sockets to new peers and closes those no longer in the map; frames
        still queued for a vanished peer are dropped (the acker replays their trees).
        """
        routes = _Routes(task_addr)
        self._routes = routes   # at once: the executor loop routes its rounds itself (send_many)
        self._outbox.put(routes)

    def is_backlogged(self) -> bool:
        """Whether executors queue remote batches faster than the send thread ships them (an
        item of the queue is a batch or a round's frames: counted at the mean number of
        batches in the items the send thread took last)."""
        return self._outbox.qsize() * self._batches_per_item > self._overload_backlog

    # ------------------------------------------------------------ send thread

    def _pin(self) -> None:
        """The transport's threads share the core of the worker's executor loop (``slot_cpu``):
        the batches they hand over stay in that core's caches."""
        pin = getattr(self._runtime, "pin_thread", None)
        if pin is not None:
            pin()

    def _send_loop(self) -> None:
        self._pin()
        packer = self._new_packer()
        next_check = 0.0
        # True at once when this is a restart (ThreadGuard) after stop() consumed the _STOP item.
        stopping = self._stop.is_set()
        while True:
            try:
                item = self._outbox.get(timeout=self._check_interval)
            except queue.Empty:
                item = None
            batches: dict[Address, list] = {}
            drained = items = 0
            while item is not None:
                if item is _STOP:
                    stopping = True
                elif type(item) is _Frames:   # send_many: a round of the executor loop, packed
                    items += 1
                    drained += item.batches
                    self._send_frames(item.frames)
                    if drained >= self._max_drain:
                        break
                elif isinstance(item, _Routes):
                    self._flush(batches, packer)
                    batches = {}
                    if item is self._routes:   # an older map, replaced since: its peers may be gone
                        self._apply_routes(item)
                else:
                    items += 1
                    self._route(item, batches)
                    drained += 1
                    if drained >= self._max_drain:
                        break   # ship what we have: a busy outbox must not grow one frame forever
                try:
                    item = self._outbox.get_nowait()
                except queue.Empty:
                    item = None
            if items:
                self._batches_per_item = drained / items
            self._flush(batches, packer)
            self._retry_pending()
            now = time.monotonic()
            if now >= next_check:
                next_check = now + self._check_interval
                self._check_backpressure(packer, now)
            if stopping:
                self._close_peers()
                return

    def _route(self, item: tuple[int, list], batches: dict[Address, list]) -> None:
        task_id, messages = item
        addr = self._routes.task_addr.get(task_id)
        if addr is None:
            total = self.counters["unroutable_messages"] = self.counters["unroutable_messages"] + len(messages)
            if total == len(messages) or total % 10000 < len(messages):   # the first, then sparsely
                log.warning("transfer: no worker known for task %d; dropped %d message(s) (%d so far)",
                            task_id, len(messages), total)
            return
        if addr == self.me:
            # The task moved into this worker but the runtime does not run it (yet): the runtime
            # decides, it drops or queues.
            self._runtime.receive(task_id, messages)  # type: ignore[union-attr]
            return
        batches.setdefault(addr, []).append((task_id, messages))

    def _new_packer(self) -> msgpack.Packer:
        return (self._serialization.packer() if self._serialization is not None
                else msgpack.Packer(use_bin_type=True))

    def _flush(self, batches: dict[Address, list], packer: msgpack.Packer) -> None:
        self._send_frames(self._frames(batches, packer))

    def _frames(self, batches: dict[Address, list], packer: msgpack.Packer) -> list[_PeerFrames]:
        """Per peer, its envelopes packed into frames below the peer's max message size."""
        out = []
        for addr, envelopes in batches.items():
            frame = self._pack(envelopes, packer)
            if frame is None:
                continue
            frames = [frame] if len(frame) <= self._max_bytes else self._split(envelopes, packer)
            out.append((addr, frames, sum(len(m) for _, m in envelopes)))
        return out

    def _send_frames(self, frames: list[_PeerFrames]) -> None:
        """Send thread: write frames to their peers' sockets, parking what a socket refuses.
        Frames packed for a peer the routes no longer name (the loop packed them while an
        assignment change was on its way here) are dropped: their tuples time out and replay."""
        peers = self._routes.peers
        for addr, packed, messages in frames:
            if addr not in peers:
                n = self.counters["unroutable_messages"] = self.counters["unroutable_messages"] + messages
                if n == messages or n % 10000 < messages:   # the first, then sparsely
                    log.warning("transfer: dropped %d message(s) packed for worker %s:%d, no longer "
                                "assigned (%d so far)", messages, *addr, n)
                continue
            peer = self._peer(addr)
            self.counters["sent_messages"] += messages
            for frame in packed:
                if peer.pending or not self._try_send(peer, frame):
                    self._park(peer, frame)

    def _split(self, envelopes: list, packer: msgpack.Packer) -> list[bytes]:
        """Frames below the peer's max message size: halve the envelopes (then a batch) until
        each fits; a single message above the limit is dropped and reported."""
        if len(envelopes) > 1:
            half = len(envelopes) // 2
            parts = [envelopes[:half], envelopes[half:]]
        else:
            task_id, messages = envelopes[0]
            if len(messages) == 1:
                self.counters["oversized_messages"] += 1
                self.counters["dropped_messages"] += 1
                self._unserializable(messages[0], ValueError(
                    f"one message exceeds storm.messaging.max.message.bytes ({self._max_bytes})"))
                return []
            half = len(messages) // 2
            parts = [[(task_id, messages[:half])], [(task_id, messages[half:])]]
        frames: list[bytes] = []
        for part in parts:
            frame = self._pack(part, packer)
            if frame is None:
                continue
            frames.extend([frame] if len(frame) <= self._max_bytes else self._split(part, packer))
        return frames

    def _pack(self, envelopes: list, packer: msgpack.Packer) -> bytes | None:
        """One msgpack call per frame; on a bad value find and report the offending messages.

        Any exception counts, not only msgpack's own: a registered serializer is user code and
        may raise anything (a KeyError); only the tuples it cannot encode are dropped, reported
        and failed, never the frame, the send thread or the executor loop (``send_many``).
        """
        encode = wire.encode
        try:
            return packer.pack([encode(task_id, messages) for task_id, messages in envelopes])
        except Exception:  # noqa: BLE001 - see above; the per-message pass finds the culprits
            packer.reset()
        good: list = []
        for task_id, messages in envelopes:
            kept = []
            for message in messages:
                try:
                    packer.pack(message)
                    kept.append(message)
                except Exception as exc:  # noqa: BLE001 - user serializers raise anything
                    packer.reset()
                    self.counters["dropped_messages"] += 1
                    self._unserializable(message, exc)
            if kept:
                good.append((task_id, kept))
        return packer.pack([encode(task_id, kept) for task_id, kept in good]) if good else None

    def _unserializable(self, message: Any, exc: Exception) -> None:
        """Report a message that cannot go on the wire and fail its tuple trees at once (the
        spout replays them) instead of leaving them to the message timeout."""
        src = message[1] if isinstance(message, (tuple, list)) and len(message) > 1 else -1
        text = f"cannot serialize tuple on stream {message[0]!r} for the wire: {type(exc).__name__}: {exc}"
        log.error("transfer: task %s: %s", src, text)
        if isinstance(src, int):
            self._report(src, text)
        self._fail_trees(message)

    def _report(self, src: int, text: str) -> None:
        """Report an error as task ``src``'s (``report_error``); never raises: reporting must
        not kill the thread that found the error (the loop's, the send or the receive thread)."""
        if self._report_error is None:
            return
        try:
            self._report_error(src, text)
        except Exception:  # noqa: BLE001 - see above
            log.exception("transfer: could not report an error of task %s", src)

    def _fail_trees(self, message: Any) -> None:
        """Send ``__ack_fail`` for every root the dropped message was anchored to."""
        anchors = message[3] if isinstance(message, (tuple, list)) and len(message) == 4 else None
        ackers = self._acker_tasks
        if not ackers or not isinstance(anchors, (tuple, list)) or type(message[0]) is not str \
                or message[0] in ACKER_STREAMS:
            return
        src = message[1] if type(message[1]) is int else -1
        for root in anchors[0::2]:
            if type(root) is int:
                self.counters["failed_trees"] += 1
                self.send(ackers[root % len(ackers)], [(ACK_FAIL, src, [root], None)])

    def _try_send(self, peer: _Peer, frame: bytes) -> bool:
        try:
            peer.socket.send(frame, zmq.NOBLOCK)   # copy=True: zero-copy would cost a tracker per frame
        except zmq.Again:
            return False
        self.counters["sent_frames"] += 1
        return True

    def _park(self, peer: _Peer, frame: bytes) -> None:
        """Keep a frame for a peer that is slow or not connected; the oldest go past a bound."""
        peer.pending.append(frame)
        while len(peer.pending) > self._max_pending:
            peer.pending.popleft()
            self.counters["dropped_messages"] += 1   # frames, counted as at least one message
            if self.counters["dropped_messages"] % 1000 == 1:
                log.warning("transfer: peer %s:%d is not taking frames; dropping the oldest",
                            *peer.addr)

    def _retry_pending(self) -> None:
        for peer in self._peers.values():
            while peer.pending and self._try_send(peer, peer.pending[0]):
                peer.pending.popleft()

    def _peer(self, addr: Address) -> _Peer:
        peer = self._peers.get(addr)
        if peer is None:
            peer = self._peers[addr] = _Peer(self._ctx, addr, self._hwm, self._curve)
            log.info("transfer: connected to worker %s:%d", *addr)
        return peer

    def _apply_routes(self, routes: _Routes) -> None:
        """Connect to the peers ``routes`` names and close the others. ``self._routes`` is
        already the newest map (``update_routes`` swaps it on the caller's thread); only the item
        of that newest map is applied, so that an older one closes no peer it still names."""
        for addr in routes.peers - {self.me}:
            self._peer(addr)
        for addr in list(self._peers):
            if addr not in routes.peers:
                self._peers.pop(addr).close()
                self._remote_bp.pop(addr, None)
                log.info("transfer: disconnected from worker %s:%d (no longer assigned)", *addr)

    def _close_peers(self) -> None:
        # At stop, give frames already handed to zmq (the last acks of a drain) a moment to
        # leave; context termination in stop() waits at most this long.
        for peer in self._peers.values():
            peer.close(linger_ms=500)
        self._peers.clear()

    # ------------------------------------------------------------ backpressure (send thread)

    def _check_backpressure(self, packer: msgpack.Packer, now: float) -> None:
        runtime = self._runtime
        overloaded = runtime.is_locally_overloaded() if runtime is not None else False
        due = overloaded and now - self._bp_sent_at >= self._bp_refresh
        if overloaded != self._bp_sent_state or due:
            signal = [BACKPRESSURE, self.host, self.port, overloaded]
            if self._control_token is not None:
                signal.append(self._control_token)
            frame = packer.pack([[CONTROL_TASK, [signal]]])
            for addr, peer in self._peers.items():
                if addr != self.me:
                    self._try_send(peer, frame)   # a lost signal is re-sent or expires
            if overloaded != self._bp_sent_state:
                log.info("transfer: backpressure %s sent to %d peer(s)", "ON" if overloaded else "OFF",
                         len(self._peers))
            self._bp_sent_state = overloaded
            self._bp_sent_at = now
        for addr, at in list(self._remote_bp.items()):
            if now - at > self._bp_expire:
                del self._remote_bp[addr]
        throttle = bool(self._remote_bp) or self.is_backlogged() or any(
            len(p.pending) > self._max_pending // 2 for p in self._peers.values())
        if throttle != self._throttled and runtime is not None:
            self._throttled = throttle
            runtime.set_remote_backpressure(throttle)

    def _on_backpressure(self, host: str, port: int, on: bool, token: Any = None) -> None:
        # Called on the receive thread; dict assignment is atomic and the send thread only
        # reads and expires entries, so no lock is needed.
        addr = (str(host), int(port))
        if self._control_token is not None:
            if token != self._control_token:
                self._refuse_control(addr, "without this topology's control token")
                return
            if addr not in self._routes.peers:
                self._refuse_control(addr, "from a worker that is not in the assignment")
                return
        if on:
            self._remote_bp[addr] = time.monotonic()
        else:
            self._remote_bp.pop(addr, None)

    def _refuse_control(self, addr: Address, why: str) -> None:
        n = self.counters["refused_control"] = self.counters["refused_control"] + 1
        if n & (n - 1) == 0:   # the 1st, 2nd, 4th, 8th, ... refused frame
            log.warning("transfer: refused a backpressure frame claiming to come from %s:%s %s "
                        "(%d so far)", str(addr[0])[:60], addr[1], why, n)

    # ------------------------------------------------------------ receive thread

    def _recv_loop(self) -> None:
        self._pin()
        pull, door = self._pull, self._door
        assert pull is not None and door is not None
        # A blocking recv with RCVTIMEO (one call per frame, GIL released while waiting) instead
        # of poll + recv; the timeout bounds how long stop() waits for this thread.
        pull.setsockopt(zmq.RCVTIMEO, 100)
        if self._monitor is None:   # once: a restarted loop (ThreadGuard) keeps the monitor
            self._monitor = pull.get_monitor_socket(zmq.EVENT_DISCONNECTED | _HANDSHAKE_FAILED)
        monitor = self._monitor
        frames = 0
        while not self._stop.is_set():
            frames += 1
            if frames & 255 == 0:
                self._check_disconnects(monitor)
            try:
                frame = pull.recv()
            except zmq.Again:
                self._check_disconnects(monitor)
                continue
            except zmq.ZMQError as exc:
                if self._stop.is_set():
                    break
                log.warning("transfer: receive error: %s", exc)
                continue
            self.counters["received_frames"] += 1
            try:
                door.take(frame)
            except DeliveryError:
                raise   # the runtime failed, not the frame: the guard reports it and restarts
            except Exception as exc:  # noqa: BLE001 - a bad frame must never kill the worker
                door.bad_frame(frame, exc)
        try:
            pull.disable_monitor()
        except zmq.ZMQError:
            pass
        monitor.close(linger=0)
        pull.close(linger=0)

    def _start_authenticator(self) -> None:
        """ZAP for the CURVE server socket: only the topology's own public key is admitted."""
        from zmq.auth.thread import ThreadAuthenticator

        public = self._curve[0]   # type: ignore[index]
        transfer = self

        class _OnlyOurKey:
            def callback(self, domain: str, key: bytes) -> bool:
                if key == public:
                    return True
                n = transfer.counters["refused_handshakes"] = transfer.counters["refused_handshakes"] + 1
                if n <= 10 or n % 100 == 0:
                    log.warning("transfer: refused a CURVE peer on port %d with an unknown key (%d so far)",
                                transfer.port, n)
                return False

        auth = ThreadAuthenticator(self._ctx, log=logging.getLogger(__name__ + ".zap"))
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=_OnlyOurKey())
        self._authenticator = auth

    def _check_disconnects(self, monitor: zmq.Socket) -> None:
        """Count peer connections the receive socket lost: a peer worker that went away, or
        one ZeroMQ cut off for a frame above ``storm.messaging.max.message.bytes``."""
        while True:
            try:
                event = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:
                return
            if _event_id(event) & _HANDSHAKE_FAILED:
                n = self.counters["refused_handshakes"] = self.counters["refused_handshakes"] + 1
                if n <= 10 or n % 100 == 0:
                    log.warning("transfer: refused a peer on port %d: its ZeroMQ handshake failed (%d so far)%s",
                                self.port, n, "; it does not have this topology's CURVE keys"
                                if self._curve is not None else "")
                continue
            n = self.counters["peer_disconnects"] = self.counters["peer_disconnects"] + 1
            if n <= 10 or n % 100 == 0:
                log.warning("transfer: a peer connection to port %d was closed (%d so far): the peer "
                            "went away, or sent a frame above storm.messaging.max.message.bytes (%d)",
                            self.port, n, self._max_bytes)


_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def _event_id(event: list[bytes]) -> int:
    """The event number of a ZeroMQ monitor message (first frame: uint16 event, uint32 value)."""
    return int.from_bytes(event[0][:2], "little") if event and len(event[0]) >= 2 else 0


class _Stop:
    def __repr__(self) -> str:
        return "STOP"


_STOP = _Stop()
