"""The generic TCP node runs a stream endpoint that is not the token ring.

``FloodEndpoint`` is a test-only stream endpoint: every broadcast goes to
every member it knows, and each member delivers what arrives in arrival
order (its own broadcasts at once). Just enough to show that the node's
pieces go through for any :class:`epto.endpoint.StreamEndpoint`: the bytes
out and in, every stream's opening frame first, ``gone()`` letting a link
go, the deliveries, the statistics, and a graceful close (the endpoint's
``leave`` frames reach the others). Real loopback sockets, every wait
bounded by ``trio.fail_after``."""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack

import attrs
import pytest
import trio
from epto.transports.trio_tcp import TcpNode, TcpNodeConfig, TcpNodeStatistics

from epto import ConfigurationError, Delivery, Event, EventId, Limits, LocalProtocolError, ProcessId
from epto.endpoint import StreamEndpoint, Transmit, parse_host_port
from epto.wire import HEADER_SIZE

_FRAME = struct.Struct(">4sBQQ")
"""A test frame: magic, kind, sender, sequence number; then the payload.
At least HEADER_SIZE bytes, as the node's readers require of every frame."""
_MAGIC = b"FLD1"
_PAD = HEADER_SIZE - _FRAME.size
HELLO, DATA, BYE = 1, 2, 3


@attrs.frozen(kw_only=True, slots=True)
class FloodStatistics:
    broadcasts: int
    delivered: int
    rejected: Mapping[str, int]
    encode_failures: int


class FloodEndpoint:
    """Flood every broadcast to the members of ``book`` (pid to address, read
    when sending: the test fills it once the nodes listen)."""

    def __init__(self, pid: ProcessId, book: Mapping[ProcessId, str], limits: Limits) -> None:
        self._pid = pid
        self._book = book
        self.limits = limits
        self.advertised: str | None = None
        self.removed: set[ProcessId] = set()
        self._gone: list[ProcessId] = []
        self._out: list[Transmit] = []
        self._deliveries: list[Delivery] = []
        self._seq = 0
        self._broadcasts = 0
        self._delivered = 0
        self._rejected: Counter[str] = Counter()
        self.left = False
        self.first_kind: dict[ProcessId, int] = {}
        """The kind of the first frame from each sender (an opening: HELLO)."""
        self.hellos: Counter[ProcessId] = Counter()
        self.byes: set[ProcessId] = set()

    # -- identity and addresses

    @property
    def pid(self) -> ProcessId:
        return self._pid

    def address_of(self, pid: ProcessId) -> str | None:
        return None if pid in self.removed else self._book.get(pid)

    def set_advertised(self, address: str) -> None:
        self.advertised = address

    def remove(self, pid: ProcessId) -> None:
        """Stop sending to ``pid`` (it left the view): ``gone()`` reports it once."""
        self.removed.add(pid)
        self._gone.append(pid)

    # -- frames

    def _frame(self, kind: int, seq: int = 0, payload: bytes = b"") -> bytes:
        return _FRAME.pack(_MAGIC, kind, self._pid, seq) + bytes(_PAD) + payload

    def _to_all(self, data: bytes) -> None:
        for dest, address in sorted(self._book.items()):
            if dest != self._pid and dest not in self.removed:
                self._out.append(Transmit(dest, address, data))

    def opening(self, dest: ProcessId) -> list[bytes]:
        return [self._frame(HELLO)]

    # -- inputs

    def broadcast(self, payload: bytes, now: float) -> EventId:
        if self.left:
            raise LocalProtocolError("left")
        if len(payload) > self.limits.max_payload_size:
            raise LocalProtocolError("payload too large")
        seq = self._seq
        self._seq += 1
        self._broadcasts += 1
        self._to_all(self._frame(DATA, seq, payload))
        self._deliver(self._pid, seq, payload)
        return (self._pid, seq)

    def _deliver(self, source: ProcessId, seq: int, payload: bytes) -> None:
        event = Event(source=source, seq=seq, ts=seq, payload=payload)
        self._deliveries.append(Delivery(event=event))

    def receive(self, data: bytes, now: float, *, peer_host: str | None = None) -> bool:
        if self.left or len(data) < HEADER_SIZE:
            self._rejected["short"] += 1
            return False
        magic, kind, sender, seq = _FRAME.unpack_from(data)
        if magic != _MAGIC or kind not in (HELLO, DATA, BYE):
            self._rejected["bad-magic"] += 1
            return False
        self.first_kind.setdefault(sender, kind)
        if kind == HELLO:
            self.hellos[sender] += 1
        elif kind == DATA:
            self._deliver(sender, seq, data[HEADER_SIZE:])
        else:
            self.byes.add(sender)
        return True

    def reject(self, fault: str) -> None:
        self._rejected[fault] += 1

    # -- outputs

    def frames_to_send(self, now: float) -> list[Transmit]:
        out, self._out = self._out, []
        return out

    def output_pending(self) -> bool:
        return bool(self._out or self._deliveries)

    def gone(self) -> list[ProcessId]:
        gone, self._gone = self._gone, []
        return gone

    def next_delivery(self) -> Delivery | None:
        if not self._deliveries:
            return None
        self._delivered += 1
        return self._deliveries.pop(0)

    def get_timer(self) -> float:
        return math.inf

    def handle_timer(self, now: float) -> None:
        pass

    def flushed(self) -> bool:
        return not self._out

    def leave(self, now: float) -> None:
        self._to_all(self._frame(BYE))
        self.left = True

    def statistics(self) -> FloodStatistics:
        return FloodStatistics(
            broadcasts=self._broadcasts,
            delivered=self._delivered,
            rejected=dict(self._rejected),
            encode_failures=0,
        )


def _flood_is_a_stream_endpoint(endpoint: FloodEndpoint) -> StreamEndpoint:
    return endpoint  # checked by mypy: the test endpoint has the protocol's surface


PIDS = (1, 2, 3)
CONFIG = TcpNodeConfig(handshake_timeout=2.0, reconnect_interval=0.01)


def factory(
    pid: ProcessId, book: Mapping[ProcessId, str], made: dict[ProcessId, FloodEndpoint]
) -> Callable[[float], FloodEndpoint]:
    def make(now: float) -> FloodEndpoint:
        made[pid] = FloodEndpoint(pid, book, CONFIG.limits)
        return made[pid]

    return make


async def collect(node: TcpNode[FloodEndpoint], into: list[EventId]) -> None:
    async for delivery in node:
        into.append(delivery.event.id)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await trio.sleep(0.01)


@pytest.mark.trio
async def test_a_flooding_endpoint_runs_on_the_generic_tcp_node() -> None:
    book: dict[ProcessId, str] = {}
    made: dict[ProcessId, FloodEndpoint] = {}
    got: dict[ProcessId, list[EventId]] = {pid: [] for pid in PIDS}
    # A member that never listens: frames for it wait, then gone() lets them go.
    closed = await trio.open_tcp_listeners(0, host="127.0.0.1")
    dead_port = closed[0].socket.getsockname()[1]
    for listener in closed:
        await listener.aclose()
    with trio.fail_after(20):
        async with trio.open_nursery() as readers, AsyncExitStack() as stack:
            nodes = {
                pid: await stack.enter_async_context(TcpNode(CONFIG, factory(pid, book, made)))
                for pid in PIDS
            }
            for pid, node in nodes.items():
                book[pid] = node.address
                assert node.pid == pid
                assert node.endpoint is made[pid]
                assert made[pid].advertised == node.address
                readers.start_soon(collect, node, got[pid])
            sent: dict[ProcessId, list[EventId]] = {pid: [] for pid in PIDS}
            for i in range(20):
                for pid, node in nodes.items():
                    sent[pid].append(node.broadcast(b"m%d" % i))
                if i % 5 == 0:
                    await trio.sleep(0)
            await until(lambda: all(len(got[p]) == 60 for p in PIDS))
            for pid in PIDS:
                # Every broadcast everywhere; each source's in the order sent
                # (reliable FIFO links).
                assert sorted(got[pid]) == sorted(e for s in sent.values() for e in s)
                for source in PIDS:
                    assert [e for e in got[pid] if e[0] == source] == sent[source]
                endpoint = made[pid]
                others = set(PIDS) - {pid}
                # Every stream opened with the endpoint's opening frame, once.
                assert endpoint.first_kind == dict.fromkeys(others, HELLO)
                assert endpoint.hellos == Counter(dict.fromkeys(others, 1))
                stats = nodes[pid].statistics()
                assert isinstance(stats, TcpNodeStatistics)
                assert stats.broadcasts == 20
                assert stats.delivered == 60
                assert stats.frames_sent == 2 * 20  # the openings are not counted
                assert stats.frames_received == 2 * 20 + 2  # they are here
                assert stats.connects == 2
                assert stats.frames_dropped == 0
                assert stats.inbound_streams == 2
                assert stats.connections_refused == {}
                assert stats.rejected == {}

            # gone(): node 1 knows a member 4 that does not listen; what waits
            # for it is dropped (and counted) once the endpoint lets it go.
            book[4] = f"127.0.0.1:{dead_port}"
            nodes[1].broadcast(b"to four")
            await until(lambda: nodes[1].statistics().connect_failures >= 2)
            assert nodes[1].statistics().frames_dropped == 0
            made[1].remove(4)
            nodes[1].broadcast(b"after four left")
            await until(lambda: nodes[1].statistics().frames_dropped == 1)
            del book[4]
            await until(lambda: all(len(got[p]) == 62 for p in PIDS))

            # A frame the endpoint refuses as a stream's first closes the stream.
            host, port = parse_host_port(nodes[2].address)
            stream = await trio.open_tcp_stream(host, port)
            await stream.send_all(struct.pack(">I", HEADER_SIZE) + bytes(HEADER_SIZE))
            await until(
                lambda: nodes[2].statistics().connections_refused == {"handshake-rejected": 1}
            )
            await stream.aclose()
            assert nodes[2].statistics().rejected == {"bad-magic": 1}

            # Graceful close: node 3 leaves, the others hear its goodbye, and
            # its reader's iteration ends.
            await nodes[3].aclose()
            await until(lambda: all(3 in made[p].byes for p in (1, 2)))
            with pytest.raises(LocalProtocolError):
                nodes[3].broadcast(b"late")
    assert all(len(got[p]) == 62 for p in PIDS)


@pytest.mark.trio
async def test_an_endpoint_with_other_frame_limits_is_refused() -> None:
    other = Limits.for_frame_size(1 << 16)
    node = TcpNode(CONFIG, lambda now: FloodEndpoint(1, {}, other))
    with pytest.raises(ConfigurationError, match="max_frame_size"):
        async with node:
            pass


@pytest.mark.trio
async def test_statistics_and_endpoint_need_a_started_node() -> None:
    node = TcpNode(CONFIG, lambda now: FloodEndpoint(1, {}, CONFIG.limits))
    with pytest.raises(LocalProtocolError, match="not started"):
        node.statistics()
    with pytest.raises(LocalProtocolError, match="not started"):
        _ = node.endpoint


def test_tcp_settings_are_validated_with_the_field_named() -> None:
    for field, value in (
        ("max_connections", 0),
        ("max_connections_per_address", -1),
        ("handshake_timeout", 0.0),
        ("first_frame_limit", 100),
        ("first_frame_limit", 2 << 20),
        ("idle_timeout", 0.0),
    ):
        with pytest.raises(ConfigurationError, match=field):
            TcpNodeConfig(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="host:port"):
        TcpNodeConfig(advertise="no port")
    assert TcpNodeConfig(idle_timeout=math.inf).idle_timeout == math.inf
