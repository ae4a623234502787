"""The Raft transport: pysyncobj's TCPTransport with durability before acks, no re-sends, and
frame sizes bounded before they are buffered.

pysyncobj frames every message as a 4-byte native `int` length and that many bytes; its
`TcpConnection` appends whatever arrives to one buffer until the declared length is there, so a
peer (anyone who reaches the port: no secret is needed to send a length) could make a replica
buffer 2 GiB, or declare a negative length. `BoundedTcpConnection` checks every length as soon as
its header arrives; this module installs it at import in place of pysyncobj's `TcpConnection` (the
module globals of `pysyncobj.tcp_server` and `pysyncobj.transport`, the two places that build
connections), and `SyncingTransport` gives every connection its bound.

An incoming connection that has not authenticated (proved the secret and said which member it
is) is capped per remote address and in total, and closed past `limits.HANDSHAKE_TIMEOUT_S`
(`handshakes.HandshakeGuard`, driven by `SyncingTransport`): pysyncobj itself held one that
sends nothing forever.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pysyncobj.tcp_server as _pysyncobj_tcp_server
import pysyncobj.transport as _pysyncobj_transport
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from raftsched import limits
from raftsched.eventlog import EventLogger
from raftsched.replica.raft.handshakes import ClosedConnections, HandshakeGuard
from raftsched.replica.raft.journal import DurableJournal

log = EventLogger(__name__)


@dataclass(slots=True)
class ReplicationStats:
    trimmed_entries: int = 0
    """Entries not re-sent because this connection already carried them in this term."""
    tracking_resets: int = 0
    """Times a follower's reset, failure or reconnection made us forget what it was sent."""
    acks: int = 0
    ack_batches: int = 0
    """Acks sent, and flushes that sent any (one fdatasync each at most): group commit."""
    appends_merged: int = 0
    """append_entries messages folded into the one before them (group commit on the leader)."""
    chunked_appends: int = 0
    """Chunks of pysyncobj's large-entry transmission sent: its last-chunk marker is wrong, so
    node.APPEND_BATCH_BYTES keeps every entry below the size that takes that path (0 expected)."""
    refused_frames: int = 0
    """Connections dropped because a frame's declared length was negative or over its bound
    (`BoundedTcpConnection`), before the frame's body was buffered."""


MAX_MERGED_APPEND_BYTES = 4 * 1024 * 1024
"""Entry bytes one merged append_entries carries at most; the next message starts a new one."""

MAX_HANDSHAKE_BYTES = 4 * 1024
"""Bytes a connection may hold before its peer has proved the cluster secret. With a secret,
the first frame on an incoming connection is the peer's session key (32 random bytes, pickled,
compressed and Fernet-encrypted: 168 bytes on the wire with the header), and the peer sends
nothing more until we answer; a frame that decrypts proves the secret. Without a secret
(insecure dev mode) nothing is ever proved and only `max_frame_bytes` applies."""

FRAME_BYTES_PER_PAYLOAD_BYTE = 3
"""On-wire bytes per byte of payload (entry data, chunk data) in a frame, with room to spare:
pickling a list of entries adds at most about 24 bytes per entry (19 measured for a 1-byte no-op
entry at 40-bit indices), no more than the entry itself (our smallest command, a Barrier, is 30
bytes as an entry), so at most x2; zlib adds at most 0.1%; Fernet adds base64 (x4/3) and 73
bytes. 2 x 1.001 x 4/3 = 2.67."""
FRAME_OVERHEAD_BYTES = 64 * 1024
"""On-wire bytes in a frame besides its payload's: the message dict, the session key, Fernet's
header and MAC, and the odd no-op entries (one per term) smaller than their pickling."""


def max_frame_bytes(append_batch_bytes: int, snapshot_chunk_bytes: int) -> int:
    """The largest frame a replica sends, given pysyncobj's `appendEntriesBatchSizeBytes`
    (node.APPEND_BATCH_BYTES, itself above the largest entry, 2 x limits.MAX_ENTRY_BYTES plus a
    margin) and `logCompactionBatchSize` (the snapshot transmission chunk). An append_entries
    carries entries until their data reaches append_batch_bytes, the last one included: less
    than twice that (`SyncObj.__getEntries`); a merged one at most that or
    MAX_MERGED_APPEND_BYTES (`SyncingTransport._hold`); a chunk of pysyncobj's large-entry
    transmission, append_batch_bytes; a snapshot chunk, snapshot_chunk_bytes. Every other
    message (votes, acks, the handshake, admin commands) is a few hundred bytes."""
    payload_bytes = max(2 * append_batch_bytes, MAX_MERGED_APPEND_BYTES, snapshot_chunk_bytes)
    return FRAME_BYTES_PER_PAYLOAD_BYTE * payload_bytes + FRAME_OVERHEAD_BYTES


_FRAME_HEADER = struct.Struct("i")
"""pysyncobj's frame header: the frame's length as a native signed int (`TcpConnection.send`)."""
FRAME_LENGTH_LIMIT = 2**31 - 1
"""The largest length the header can declare."""


class BoundedTcpConnection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's TcpConnection that drops the connection, at once, when a frame declares a
    negative length or one over `max_frame_bytes`, or when a connection that has not proved the
    secret holds more than MAX_HANDSHAKE_BYTES.

    pysyncobj reads (`__processRead`, one recv of recvBufferSize each) until the socket has
    nothing more, and only then parses the buffer frame by frame (`__processParseMessage`). We
    check after every recv, walking every header that has arrived (`_next_header`: where the next
    one starts, kept in step with the buffer as frames are parsed off its front), so at most one
    recv beyond a bad header is ever buffered. The connection's transport sets `max_frame_bytes`
    and `on_refused` (`SyncingTransport._bound`)."""

    max_frame_bytes = FRAME_LENGTH_LIMIT
    on_refused: Callable[[], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._next_header = 0
        super().__init__(*args, **kwargs)

    def connect(self, host: Any, port: Any) -> Any:
        self._next_header = 0  # pysyncobj empties the buffer
        return super().connect(host, port)

    def disconnect(self) -> None:
        self._next_header = 0  # pysyncobj empties the buffer
        super().disconnect()

    def remote_host(self) -> str | None:
        """The peer's IP address; None once the socket is closed or no longer connected."""
        sock = self._TcpConnection__socket
        if sock is None:
            return None
        try:
            return str(sock.getpeername()[0])
        except OSError:
            return None

    def _TcpConnection__processRead(self) -> bool:
        more = bool(super()._TcpConnection__processRead())
        if more and not self._within_bounds():
            on_refused = self.on_refused
            self.disconnect()
            if on_refused is not None:
                on_refused()
            return False
        return more

    def _TcpConnection__processParseMessage(self) -> Any:
        before = len(self._TcpConnection__readBuffer)
        message = super()._TcpConnection__processParseMessage()
        parsed = before - len(self._TcpConnection__readBuffer)
        self._next_header = max(0, self._next_header - parsed)
        return message

    def _within_bounds(self) -> bool:
        buffer = self._TcpConnection__readBuffer
        limit = self.max_frame_bytes
        if self.encryptor is not None and self.recvRandKey is None:  # the secret is unproved
            if len(buffer) > MAX_HANDSHAKE_BYTES:
                return False
            limit = MAX_HANDSHAKE_BYTES
        while self._next_header + _FRAME_HEADER.size <= len(buffer):
            (length,) = _FRAME_HEADER.unpack_from(buffer, self._next_header)
            if not 0 <= length <= limit:
                return False
            self._next_header += _FRAME_HEADER.size + length
        return True


_pysyncobj_tcp_server.TcpConnection = BoundedTcpConnection  # incoming connections
_pysyncobj_transport.TcpConnection = BoundedTcpConnection  # outgoing ones (TCPTransport.addNode)


def _last_entry(message: dict[str, Any]) -> tuple[int, int]:
    """(index, term) of the last entry a plain append_entries message leaves the follower at."""
    entries = message["entries"]
    if entries:
        return int(entries[-1][1]), int(entries[-1][2])
    return int(message["prevLogIdx"]), int(message["prevLogTerm"])


@dataclass(slots=True)
class _Sent:
    """The last entry sent to one follower over its current connection, in one leader term."""

    term: int
    index: int
    index_term: int


class SyncingTransport(TCPTransport):  # type: ignore[misc]
    """TCPTransport that (1) makes the journal durable before a message leaves, except a
    leader's `append_entries` (see "Durability points" in the module docstring), with group
    commit for follower acks, and (2) does not re-send entries a connection already carried.

    (1): a follower's acks (`next_node_idx`) are held back and sent together by `flush` — one
    fdatasync, then the acks in order — at the end of the tick, or before any other message so
    that the order of messages on the wire is always the order pysyncobj sent them in (an ack
    overtaken by a vote could otherwise reach a new leader as if it were about its log).

    (3): with `appendEntriesUseBatch=False` pysyncobj's leader sends one append_entries per
    follower for every command it takes from its queue — each pickled, encrypted and sent on its
    own, and answered on its own. While `hold_appends()` is in force (the node wraps the leader's
    command-queue drain in it), consecutive append_entries to one follower are merged into one
    message carrying all their entries, and `release_appends()` sends it: N concurrent proposals
    reach each follower as one message and come back as one ack (group commit). Merging needs
    the next message to continue exactly where the held one ends (same term, `prevLogIdx` = its
    last entry); anything else, and any other message, first sends what is held, so the order on
    the wire stays the order pysyncobj sent in. A merged message is bounded by
    MAX_MERGED_APPEND_BYTES of entry data.

    (2): pysyncobj's leader moves a follower's nextIndex back to each ack's position while later
    entries are still in flight (`next_node_idx` handling in `SyncObj.__onMessageReceived`), so
    every new command re-sends all in-flight entries (up to 64 KiB per message), and the follower
    truncates and re-adds them ("truncating already-applied log entries"). Under pipelined load
    the backlog grows until followers miss heartbeats and elections churn. A leader's log is
    append-only within its term and TCP delivers in order, so we cut the already-sent prefix off
    the message: `prevLogIdx/prevLogTerm` move to the last entry already sent (its term is
    known), and the follower's own consistency check still guards the result — a follower that
    lacks it answers `reset`, and any reset, failure, reconnection, snapshot transmission or
    new term makes us forget what was sent, so pysyncobj's own retransmission takes over. The
    follower's reply (`prevLogIdx + 1 + len(entries)`) is what the untrimmed message would have
    produced, or further along when a heartbeat is re-pointed — and then true, since the
    follower verified that entry.

    (4): every connection, incoming or outgoing, is a `BoundedTcpConnection` given
    `max_frame_bytes` (derived from the conf pysyncobj sends with); refusals are counted in
    `replication.refused_frames`.

    (5): an incoming connection waits for its handshake under `handshakes` (a HandshakeGuard):
    over its caps it is closed at accept, before pysyncobj hears of it; it is settled when it
    leaves pysyncobj's `_unknownConnections` (the peer proved the secret and named itself) or
    closes; past `handshake_timeout_s` a tick closes it. Each tick logs what was closed as one
    warning with counts, at most every handshakes.REPORT_PERIOD_S.
    """

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any,
                 journal: DurableJournal, on_tick: Callable[[], None],
                 handshake_timeout_s: float = limits.HANDSHAKE_TIMEOUT_S) -> None:
        self.max_frame_bytes = max_frame_bytes(syncObj.conf.appendEntriesBatchSizeBytes,
                                               syncObj.conf.logCompactionBatchSize)
        """The bound on every frame this replica receives (`BoundedTcpConnection`)."""
        assert self.max_frame_bytes < FRAME_LENGTH_LIMIT, "no frame would ever be refused"
        self._journal = journal
        self._sent: dict[Any, _Sent] = {}
        self._acks: list[tuple[Any, Any]] = []
        self._holding = False
        self._held: dict[Any, tuple[dict[str, Any], int]] = {}
        """Per follower: the append_entries held back, and its entry bytes."""
        self.replication = ReplicationStats()
        self.handshakes: HandshakeGuard[BoundedTcpConnection] = HandshakeGuard(
            handshake_timeout_s, limits.MAX_UNAUTHENTICATED_RAFT_CONNECTIONS_PER_ADDRESS,
            limits.MAX_UNAUTHENTICATED_RAFT_CONNECTIONS)
        super().__init__(syncObj, selfNode, otherNodes)
        syncObj.addOnTickCallback(on_tick)

    def send(self, node: Any, message: Any) -> bool:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "next_node_idx":
            self._acks.append((node, message))  # pysyncobj ignores send()'s result here
            return True
        if kind == "append_entries":
            self.replication.chunked_appends += "transmission" in message
            if self._acks:
                self.flush()
            message = self._trim(node, message)
            if self._holding and self._hold(node, message):
                return True  # pysyncobj ignores send()'s result for append_entries
            self._release(node)
            return self._send_now(node, message)
        self.release_appends()
        self.flush()
        return self._send_now(node, message)

    def hold_appends(self) -> None:
        """From now until `release_appends`, merge consecutive append_entries per follower."""
        self._holding = True

    def release_appends(self) -> None:
        """Send every held append_entries (in the order they were held) and stop holding."""
        self._holding = False
        for node in list(self._held):
            self._release(node)

    def _hold(self, node: Any, message: dict[str, Any]) -> bool:
        """Merge `message` into the one held for `node`, or hold it; False if it cannot be
        held (not a plain entries message) — the caller then sends it at once."""
        entries = message.get("entries")
        if entries is None or "transmission" in message or "prevLogIdx" not in message:
            return False
        size = sum(len(entry[0]) for entry in entries)
        held = self._held.get(node)
        if held is not None:
            first, held_size = held
            last_index, last_term = _last_entry(first)
            if (message["term"] == first["term"] and message["prevLogIdx"] == last_index
                    and message["prevLogTerm"] == last_term
                    and held_size + size <= MAX_MERGED_APPEND_BYTES):
                first["entries"] = [*first["entries"], *entries]
                first["commit_index"] = message.get("commit_index", first.get("commit_index"))
                self._held[node] = (first, held_size + size)
                self.replication.appends_merged += 1
                return True
            self._release(node)
        self._held[node] = ({**message, "entries": list(entries)}, size)
        return True

    def _release(self, node: Any) -> None:
        held = self._held.pop(node, None)
        if held is not None:
            self._send_now(node, held[0])

    def flush(self) -> None:
        """Make the journal durable, then send the held-back acks in order."""
        self._journal.sync()
        acks, self._acks = self._acks, []
        for node, message in acks:
            self._send_now(node, message)
        self.replication.ack_batches += bool(acks)
        self.replication.acks += len(acks)

    def _send_now(self, node: Any, message: Any) -> bool:
        sent = bool(super().send(node, message))
        if not sent:
            self._forget(node)
        return sent

    def _trim(self, node: Any, message: dict[str, Any]) -> dict[str, Any]:
        entries = message.get("entries")
        if "prevLogIdx" not in message or "transmission" in message or entries is None:
            self._forget(node)  # snapshot or large-entry transmission: pysyncobj's own path
            return message
        term, previous = message["term"], message["prevLogIdx"]
        sent = self._sent.get(node)
        if sent is not None and sent.term == term and sent.index > previous:
            skip = min(sent.index - previous, len(entries))
            if skip == len(entries):  # nothing new: point it at the last entry already sent
                message = {**message, "prevLogIdx": sent.index, "prevLogTerm": sent.index_term,
                           "entries": []}
            else:
                message = {**message, "prevLogIdx": previous + skip,
                           "prevLogTerm": entries[skip - 1][2], "entries": entries[skip:]}
            self.replication.trimmed_entries += skip
            entries = message["entries"]
        if entries:
            last = entries[-1]
            self._sent[node] = _Sent(term, last[1], last[2])
        return message

    def _forget(self, node: Any) -> None:
        if self._sent.pop(node, None) is not None:
            self.replication.tracking_resets += 1

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if (isinstance(message, dict) and message.get("type") == "next_node_idx"
                and (message.get("reset") or not message.get("success"))):
            self._forget(node)
        super()._onMessageReceived(node, message)

    def _onNodeConnected(self, node: Any) -> None:
        self._forget(node)
        super()._onNodeConnected(node)

    def addNode(self, node: Any) -> None:
        super().addNode(node)
        conn = self._connections.get(node)  # only for nodes this replica connects to
        if conn is not None:
            self._bound(conn)

    def _onNewIncomingConnection(self, conn: Any) -> None:
        self._bound(conn)
        host = conn.remote_host()
        if host is None or not self.handshakes.admit(conn, host, time.monotonic()):
            conn.disconnect()  # none of pysyncobj's callbacks is set yet: it never hears of it
            return
        super()._onNewIncomingConnection(conn)

    def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
        super()._onIncomingMessageReceived(conn, message)
        if conn not in self._unknownConnections:  # it named itself (or pysyncobj closed it)
            self.handshakes.settle(conn)

    def _onDisconnected(self, conn: Any) -> None:
        self.handshakes.settle(conn)
        super()._onDisconnected(conn)

    def _onTick(self) -> None:
        super()._onTick()
        now_s = time.monotonic()
        for conn in self.handshakes.expire(now_s):
            conn.disconnect()
        report = self.handshakes.report(now_s)
        if report is not None:
            log.warning("raft_unauthenticated_connections_closed", over_cap=report.over_cap,
                        handshake_timeout=report.handshake_timeout, pending=report.pending,
                        addresses=",".join(report.addresses), from_other_addresses=report.unnamed,
                        timeout_s=self.handshakes.timeout_s,
                        max_per_address=self.handshakes.max_per_address,
                        max_total=self.handshakes.max_total)

    def closed_connections(self) -> ClosedConnections:
        totals = self.handshakes.totals
        return ClosedConnections(self.replication.refused_frames, totals.over_cap,
                                 totals.handshake_timeout)

    def _bound(self, conn: Any) -> None:
        assert isinstance(conn, BoundedTcpConnection), \
            "pysyncobj built a connection of its own: the adapter no longer matches the library"
        conn.max_frame_bytes = self.max_frame_bytes
        conn.on_refused = self._count_refused

    def _count_refused(self) -> None:
        self.replication.refused_frames += 1

    def _onNodeDisconnected(self, node: Any) -> None:
        self._forget(node)
        super()._onNodeDisconnected(node)
