"""Messages of the Cyclon peer sampling protocol, as value objects.

They live apart from the Cyclon state machine so that the wire codec can
encode them without importing the protocol, and the protocol can be tested
without the codec.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from .._event import ProcessId


@attrs.frozen(kw_only=True, slots=True)
class PeerDescriptor:
    """A peer as Cyclon knows it: its id, how to reach it, and its age in shuffles."""

    pid: ProcessId
    address: bytes
    """Transport address, opaque to the core (for example ``b"127.0.0.1:9000"``)."""
    age: int = 0


@attrs.frozen(kw_only=True, slots=True)
class ShuffleRequest:
    """Sent by the initiator of a shuffle: a subset of its view, itself included."""

    entries: tuple[PeerDescriptor, ...]


@attrs.frozen(kw_only=True, slots=True)
class ShuffleReply:
    """The answer: a subset of the receiver's view."""

    entries: tuple[PeerDescriptor, ...]


@attrs.frozen(kw_only=True, slots=True)
class Leave:
    """A graceful leave: receivers drop the sender from their views."""


PeerMessage: TypeAlias = ShuffleRequest | ShuffleReply | Leave
"""Every message of the peer sampling protocol."""
