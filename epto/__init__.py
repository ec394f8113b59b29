"""epto: total-order broadcast for groups of processes.

The public surface is re-exported here; modules whose names start with an
underscore are private.
"""

# Layered balls: the mapping processes exchange, built for cheap merging
from ._ball import LayeredBall as LayeredBall
from ._config import ClockKind as ClockKind
from ._config import Config as Config
from ._config import OrderingKind as OrderingKind
from ._errors import ConfigurationError as ConfigurationError
from ._errors import EptoError as EptoError
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._event import Ball as Ball
from ._event import BallEntry as BallEntry
from ._event import Delivery as Delivery
from ._event import DeliveryTag as DeliveryTag
from ._event import Event as Event
from ._event import EventId as EventId
from ._event import ProcessId as ProcessId
from ._process import Process as Process
from ._process import ProcessStatistics as ProcessStatistics
from ._sampler import FullView as FullView
from ._sampler import Membership as Membership
from ._sampler import PeerSampler as PeerSampler

# isort: split
# Wire format: frames, kinds, limits, codec
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
from ._limits import Limits as Limits

# isort: split
# Group encryption of frames (needs the crypto extra when used)
from ._replay import ReplayWindow as ReplayWindow
from ._seal import GroupKey as GroupKey
from ._seal import GroupSealer as GroupSealer

# isort: split
# Cyclon peer sampling and the Node (EpTO process + peer sampler)
from ._cyclon import Cyclon as Cyclon
from ._cyclon import CyclonConfig as CyclonConfig
from ._cyclon import CyclonStatistics as CyclonStatistics
from ._node import Node as Node
from ._node import NodeMessage as NodeMessage
from ._node import NodeStatistics as NodeStatistics
from ._peer_messages import Leave as Leave
from ._peer_messages import PeerDescriptor as PeerDescriptor
from ._peer_messages import PeerMessage as PeerMessage
from ._peer_messages import ShuffleReply as ShuffleReply
from ._peer_messages import ShuffleRequest as ShuffleRequest

# isort: split
# Event signatures (Ed25519; needs the crypto extra when used)
from ._signing import EventSigner as EventSigner
from ._signing import SignatureVerifier as SignatureVerifier
from ._signing import VerifierStatistics as VerifierStatistics
from ._signing import signed_message as signed_message

# isort: split
# Token-ring mode: moving sequencer with two-level membership (epto.tokenring)
from .tokenring import TokenRingConfig as TokenRingConfig
from .tokenring import TokenRingProcess as TokenRingProcess

__version__ = "0.1.0.dev0"
