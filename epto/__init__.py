"""epto: total-order broadcast for groups of processes.

This module holds what an application uses: the engines and their
configuration, events and deliveries, errors, and the keys and signatures it
configures. The wire format (frames, codec, sealing, the messages engines
exchange) is in :mod:`epto.wire`, for drivers. Other public modules:
:mod:`epto.tokenring`, :mod:`epto.params`, :mod:`epto.keys`, :mod:`epto.check`,
:mod:`epto.stability`, :mod:`epto.log`, :mod:`epto.spark`, :mod:`epto.transports`.
Modules whose names start with an underscore are private.
"""

# Engines and their configuration
from ._config import ClockKind as ClockKind
from ._config import Config as Config
from ._config import OrderingKind as OrderingKind
from ._cyclon import Cyclon as Cyclon
from ._cyclon import CyclonConfig as CyclonConfig
from ._cyclon import CyclonStatistics as CyclonStatistics
from ._limits import Limits as Limits
from ._node import Node as Node
from ._node import NodeStatistics as NodeStatistics
from ._params import Parameters as Parameters
from ._params import derive_parameters as derive_parameters
from ._peer_messages import PeerDescriptor as PeerDescriptor
from ._process import Process as Process
from ._process import ProcessStatistics as ProcessStatistics
from ._sampler import FullView as FullView
from ._sampler import Membership as Membership
from ._sampler import PeerSampler as PeerSampler

# isort: split
# Events and deliveries
from ._event import Delivery as Delivery
from ._event import DeliveryTag as DeliveryTag
from ._event import Event as Event
from ._event import EventId as EventId
from ._event import ProcessId as ProcessId

# isort: split
# Errors
from ._errors import ConfigurationError as ConfigurationError
from ._errors import EptoError as EptoError
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError

# isort: split
# Group encryption and event signatures (the crypto extra, when used); files: epto.keys
from ._seal import GroupKey as GroupKey
from ._signing import EventSigner as EventSigner
from ._signing import SignatureVerifier as SignatureVerifier
from ._signing import VerifierStatistics as VerifierStatistics

# isort: split
# Token-ring mode: moving sequencer with two-level membership (epto.tokenring)
from .tokenring import TokenRingConfig as TokenRingConfig
from .tokenring import TokenRingProcess as TokenRingProcess

__version__ = "0.1.0.dev0"

__all__ = [
    "ClockKind",
    "Config",
    "ConfigurationError",
    "Cyclon",
    "CyclonConfig",
    "CyclonStatistics",
    "Delivery",
    "DeliveryTag",
    "EptoError",
    "Event",
    "EventId",
    "EventSigner",
    "FullView",
    "GroupKey",
    "Limits",
    "LocalProtocolError",
    "Membership",
    "Node",
    "NodeStatistics",
    "OrderingKind",
    "Parameters",
    "PeerDescriptor",
    "PeerSampler",
    "Process",
    "ProcessId",
    "ProcessStatistics",
    "RemoteProtocolError",
    "SignatureVerifier",
    "TokenRingConfig",
    "TokenRingProcess",
    "VerifierStatistics",
    "derive_parameters",
]
