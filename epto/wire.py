"""The wire format, for drivers: frames, their kinds and registry, the codec,
sealing, and the messages the engines exchange.

An application configures and runs the engines with the names in :mod:`epto`;
a driver that moves their messages over a network encodes them with a
:class:`FrameCodec` (sealed with a :class:`GroupSealer` when the group has a
key) and decodes what arrives with the same codec. See docs/wire-format.md.
"""

# Frames: header, kinds, registry, the reader bodies are parsed with
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

# isort: split
# The codec, sealing with a group key, replay protection
from ._codec import FrameCodec as FrameCodec
from ._codec import Sealer as Sealer
from ._replay import ReplayWindow as ReplayWindow
from ._seal import GroupSealer as GroupSealer

# isort: split
# What the engines exchange: balls, peer-sampling messages, signed bytes
from ._event import Ball as Ball
from ._event import BallEntry as BallEntry
from ._signing import signed_message as signed_message
from .epidemic._ball import LayeredBall as LayeredBall
from .epidemic._node import NodeMessage as NodeMessage
from .epidemic._peer_messages import Leave as Leave
from .epidemic._peer_messages import PeerMessage as PeerMessage
from .epidemic._peer_messages import ShuffleReply as ShuffleReply
from .epidemic._peer_messages import ShuffleRequest as ShuffleRequest

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
