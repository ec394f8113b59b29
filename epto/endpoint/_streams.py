"""What the endpoints of stream transports share (the token ring's and the
atoms'): their codec with the address frame kind, the address directory,
and the rules for frames in and out.

* In: a frame the codec refuses is counted by the codec and reported as not
  accepted; an address frame fills the directory (the sender's own entry
  replaces what was known, with the connection's host for an unspecified
  one); anything else goes to the engine.
* Out: every message is encoded for its receiver; without a sealer a
  message sent to several processes is encoded once; a message that cannot
  be framed is counted (``encode_failures``) and dropped.
* Opening a stream: this process's own address first, in a frame small
  enough for a receiver's first-frame limit (an empty book if the address
  cannot be encoded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .._errors import LocalProtocolError
from .._event import ProcessId
from ..wire._codec import FrameCodec
from ..wire._limits import Limits
from ._addresses import AddressBook, Directory
from ._protocol import Transmit


def check_payload(limits: Limits, payload: bytes) -> None:
    """Refuse a payload no frame could carry, before the engine sees it."""
    limit = limits.max_payload_size
    if len(payload) > limit:
        raise LocalProtocolError(
            f"payload of {len(payload)} bytes exceeds limits.max_payload_size={limit}"
        )


class StreamFraming:
    """The codec and the directory of one stream endpoint (see the module docstring)."""

    def __init__(self, pid: ProcessId, codec: FrameCodec, directory: Directory) -> None:
        self.pid = pid
        self.codec = codec
        self.directory = directory
        self.encode_failures = 0

    def receive(
        self,
        data: bytes,
        now: float,
        peer_host: str | None,
        feed: Callable[[ProcessId, object], None],
    ) -> bool:
        frame = self.codec.receive(data, now)  # counts what it refuses
        if frame is None:
            return False
        if type(frame.message) is AddressBook:
            self.directory.learn(frame.sender, frame.message, lambda: peer_host or "")
        else:
            feed(frame.sender, frame.message)
        return True

    def frames(self, messages: Iterable[tuple[ProcessId, object]]) -> list[Transmit]:
        """The frames of ``(destination, message)`` pairs, to every process but
        this one (a kind with a splitting rule may take several)."""
        out: list[Transmit] = []
        me = self.pid
        encode = self.codec.encode
        shared = self.codec.sealer is None
        addresses = self.directory.addresses
        encoded: dict[int, list[bytes]] = {}
        for dest, message in messages:
            if dest == me:
                continue
            frames = encoded.get(id(message)) if shared else None
            if frames is None:
                try:
                    frames = encode(me, message, to=dest)
                except LocalProtocolError:
                    self.encode_failures += 1
                    continue
                if shared:
                    encoded[id(message)] = frames
            address = addresses.get(dest, "")
            for data in frames:
                out.append(Transmit(dest, address, data))
        return out

    def encode(self, message: AddressBook, dest: ProcessId) -> list[bytes]:
        try:
            return self.codec.encode(self.pid, message, to=dest)
        except LocalProtocolError:
            self.encode_failures += 1
            return []

    def opener(self, dest: ProcessId) -> list[bytes]:
        """The first frame of a stream to ``dest``: this process's own address."""
        frames = self.encode(AddressBook(entries=((self.pid, self.directory.advertised),)), dest)
        return frames or self.codec.encode(self.pid, AddressBook(entries=()), to=dest)

    def rejected(self, *engine: Mapping[str, int]) -> dict[str, int]:
        """Input refused, by fault: the codec's, the directory's, the engine's."""
        rejected = dict(self.codec.rejected)
        if self.directory.rejected:
            rejected["bad-address"] = rejected.get("bad-address", 0) + self.directory.rejected
        for counts in engine:
            for fault, count in counts.items():
                rejected[fault] = rejected.get(fault, 0) + count
        return rejected
