"""The wire format, for drivers: frames, their kinds and registry, the codec,
sealing, and the messages the engines exchange.

An application configures and runs the engines with the names in :mod:`epto`;
a driver that moves their messages over a network encodes them with a
:class:`FrameCodec` (sealed with a :class:`GroupSealer` when the group has a
key) and decodes what arrives with the same codec. See docs/wire-format.md.
"""

import typing as _typing

from .._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from .._event import Ball as Ball
    from .._event import BallEntry as BallEntry
    from ..epidemic._ball import LayeredBall as LayeredBall
    from ..epidemic._node import NodeMessage as NodeMessage
    from ..epidemic._peer_messages import Leave as Leave
    from ..epidemic._peer_messages import PeerMessage as PeerMessage
    from ..epidemic._peer_messages import ShuffleReply as ShuffleReply
    from ..epidemic._peer_messages import ShuffleRequest as ShuffleRequest
    from ._codec import FrameCodec as FrameCodec
    from ._codec import Sealer as Sealer
    from ._frame_bodies import KIND_BALL as KIND_BALL
    from ._frame_bodies import KIND_LEAVE as KIND_LEAVE
    from ._frame_bodies import KIND_SHUFFLE_REPLY as KIND_SHUFFLE_REPLY
    from ._frame_bodies import KIND_SHUFFLE_REQUEST as KIND_SHUFFLE_REQUEST
    from ._frame_bodies import default_registry as default_registry
    from ._frames import Frame as Frame
    from ._frames import FrameKind as FrameKind
    from ._frames import FrameRegistry as FrameRegistry
    from ._frames import Reader as Reader
    from ._limits import HEADER_SIZE as HEADER_SIZE
    from ._replay import ReplayWindow as ReplayWindow
    from ._seal import GroupSealer as GroupSealer
    from ._signing import signed_message as signed_message

# The package holds the wire's modules (frames and their bodies, the codec,
# sealing, signing, keys, limits, replay protection), which the engines and
# endpoints import directly. Its public names load on first use (PEP 562):
# the engines import ``epto.wire._limits`` and ``epto.wire._frames`` on
# ``import epto``, and that must not load the codec, the sealing code or the
# engines' own messages re-exported here. The name maps to its module.
_LAZY: dict[str, str] = {
    "KIND_BALL": "._frame_bodies",
    "KIND_LEAVE": "._frame_bodies",
    "KIND_SHUFFLE_REPLY": "._frame_bodies",
    "KIND_SHUFFLE_REQUEST": "._frame_bodies",
    "default_registry": "._frame_bodies",
    "Frame": "._frames",
    "FrameKind": "._frames",
    "FrameRegistry": "._frames",
    "Reader": "._frames",
    "HEADER_SIZE": "._limits",
    "FrameCodec": "._codec",
    "Sealer": "._codec",
    "ReplayWindow": "._replay",
    "GroupSealer": "._seal",
    "Ball": ".._event",
    "BallEntry": ".._event",
    "signed_message": "._signing",
    "LayeredBall": "..epidemic._ball",
    "NodeMessage": "..epidemic._node",
    "Leave": "..epidemic._peer_messages",
    "PeerMessage": "..epidemic._peer_messages",
    "ShuffleReply": "..epidemic._peer_messages",
    "ShuffleRequest": "..epidemic._peer_messages",
}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY)

__all__ = [
    "HEADER_SIZE",
    "KIND_BALL",
    "KIND_LEAVE",
    "KIND_SHUFFLE_REPLY",
    "KIND_SHUFFLE_REQUEST",
    "Ball",
    "BallEntry",
    "Frame",
    "FrameCodec",
    "FrameKind",
    "FrameRegistry",
    "GroupSealer",
    "LayeredBall",
    "Leave",
    "NodeMessage",
    "PeerMessage",
    "Reader",
    "ReplayWindow",
    "Sealer",
    "ShuffleReply",
    "ShuffleRequest",
    "default_registry",
    "signed_message",
]
