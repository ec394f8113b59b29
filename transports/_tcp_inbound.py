"""The incoming TCP streams of a token-ring node: each one is read by its own
task, cut into frames, decoded and handed to the node, until it ends or
breaks its framing (then it is closed; the sender reconnects)."""

from __future__ import annotations

from typing import Any, Protocol

import trio

from epto import FrameCodec, ProcessId
from epto._limits import HEADER_SIZE

from ._addresses import AddressBook
from ._tcp_framing import FrameReader, FramingError

__all__ = ["Inbound", "read_stream"]

_RECV_SIZE = 262_144
_FRAMES_PER_TURN = 16
"""Frames fed from one chunk before the reader lets the other tasks run."""


class Inbound(Protocol):
    """What a reader hands the decoded frames to (the node)."""

    def _learn_addresses(
        self, sender: ProcessId, book: AddressBook, stream: trio.SocketStream
    ) -> None: ...

    def _deliver_frame(self, sender: ProcessId, message: Any, now: float) -> bool:
        """Feed one message to the process; False once the node is closed
        (the reader stops)."""
        ...

    def _after_input(self) -> None:
        """What the fed frames produced is to be sent, soon."""
        ...


async def read_stream(stream: trio.SocketStream, codec: FrameCodec, inbound: Inbound) -> None:
    """Read length-prefixed frames from one incoming stream until it ends or
    breaks the framing."""
    reader = FrameReader(max_frame=codec.limits.max_frame_size, min_frame=HEADER_SIZE)
    try:
        async with stream:
            while True:
                chunk = await stream.receive_some(_RECV_SIZE)
                if not chunk:
                    return
                reader.feed(chunk)
                fed = 0
                while True:
                    try:
                        data = reader.next_frame()
                    except FramingError:
                        codec.rejected["bad-length"] += 1
                        return
                    if data is None:
                        break
                    now = trio.current_time()
                    frame = codec.receive(data, now)
                    if frame is None:
                        continue
                    if type(frame.message) is AddressBook:
                        inbound._learn_addresses(frame.sender, frame.message, stream)
                        continue
                    if not inbound._deliver_frame(frame.sender, frame.message, now):
                        return
                    fed += 1
                    if fed % _FRAMES_PER_TURN == 0:
                        # A long chunk: let the other tasks run (send what
                        # these frames produced, a token to pass on).
                        inbound._after_input()
                        await trio.lowlevel.checkpoint()
                if fed:
                    inbound._after_input()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return
