"""Limits on what a peer may send, checked before anything is allocated.

Every decoder reads a length or a count, compares it with these limits and
with the bytes actually left in the frame, and only then slices or builds
objects. A hostile header that claims 2**31 events costs a comparison.
"""

from __future__ import annotations

import attrs

from .._errors import ConfigurationError

HEADER_SIZE = 24
"""Bytes of the frame header (docs/wire-format.md)."""
SEAL_OVERHEAD = 12 + 16
"""Bytes a sealed frame adds: the 12-byte nonce and the 16-byte AEAD tag."""
EVENT_FIXED_SIZE = 31
"""Bytes of one event entry in a ball besides its payload and signature."""
SIGNATURE_SIZE = 64
"""An Ed25519 signature."""
PEER_FIXED_SIZE = 14
"""Bytes of one peer descriptor besides its address."""


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"Limits.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen(kw_only=True, slots=True)
class Limits:
    """Bounds on frames, for both directions.

    Senders split balls so that no frame exceeds ``max_frame_size``; receivers
    reject anything beyond these bounds with a ``RemoteProtocolError``. All
    members of a group must use the same limits (a receiver with smaller
    limits drops what a sender with larger ones produces).

    The default frame size, 1400 bytes, fits one Ethernet-MTU datagram over
    IPv4 or IPv6 with room for a tunnel header, so no datagram is ever
    fragmented by IP (one lost fragment loses the whole datagram). Raise it
    (up to 65507 for UDP over IPv4) for large payloads on a local network, or
    use a stream transport.
    """

    max_frame_size: int = attrs.field(default=1400, validator=_positive)
    """Bytes of a whole frame as it travels, header and seal included."""
    max_events_per_ball: int = attrs.field(default=1024, validator=_positive)
    """Events in one ball frame (a split ball counts per frame)."""
    max_payload_size: int = attrs.field(default=1024, validator=_positive)
    """Bytes of one event's payload."""
    max_peer_entries: int = attrs.field(default=64, validator=_positive)
    """Peer descriptors in one shuffle request or reply."""
    max_address_size: int = attrs.field(default=255, validator=_positive)
    """Bytes of one peer address."""

    def __attrs_post_init__(self) -> None:
        if self.max_frame_size > 1 << 24:
            raise ConfigurationError("Limits.max_frame_size must be at most 16 MiB")
        if self.max_events_per_ball > 0xFFFF:
            raise ConfigurationError("Limits.max_events_per_ball must be at most 65535")
        if self.max_peer_entries > 0xFFFF:
            raise ConfigurationError("Limits.max_peer_entries must be at most 65535")
        if self.max_address_size > 0xFFFF:
            raise ConfigurationError("Limits.max_address_size must be at most 65535")
        biggest_event = EVENT_FIXED_SIZE + SIGNATURE_SIZE + self.max_payload_size
        room = self.max_frame_size - HEADER_SIZE - SEAL_OVERHEAD - 2
        if biggest_event > room:
            raise ConfigurationError(
                f"Limits.max_payload_size={self.max_payload_size} does not fit in a "
                f"sealed, signed frame of max_frame_size={self.max_frame_size} bytes "
                f"(at most {room - EVENT_FIXED_SIZE - SIGNATURE_SIZE})"
            )
        biggest_peer = PEER_FIXED_SIZE + self.max_address_size
        if 2 + biggest_peer > room:
            raise ConfigurationError(
                f"Limits.max_address_size={self.max_address_size} does not fit in a frame"
            )

    @classmethod
    def for_frame_size(cls, max_frame_size: int, **fields: int) -> Limits:
        """Limits for ``max_frame_size`` with the largest payload that still fits
        a sealed frame with one signed event (unless ``max_payload_size`` is given)."""
        room = max_frame_size - HEADER_SIZE - SEAL_OVERHEAD - 2
        fields.setdefault("max_payload_size", max(1, room - EVENT_FIXED_SIZE - SIGNATURE_SIZE))
        return cls(max_frame_size=max_frame_size, **fields)
