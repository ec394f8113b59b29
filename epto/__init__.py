"""epto: total-order broadcast for groups of processes.

This module holds what an application uses: a node's configuration
(:class:`NodeConfig`) and the engines', events and deliveries, errors, the
keys and signatures it configures, and the state-machine layer's
:class:`StateMachine` and :func:`replicated`. Opening a node is the
drivers' (``epto.transports.open_node``): the core never imports them. The
engines themselves are packages: EpTO (its process, node and peer samplers) in
:mod:`epto.epidemic`, the token ring in :mod:`epto.tokenring`, sequencing
atoms in :mod:`epto.atoms`. The wire format (frames, codec, sealing, the
messages engines exchange) is in :mod:`epto.wire`, for drivers. Other public
modules: :mod:`epto.params`, :mod:`epto.keys`, :mod:`epto.check`,
:mod:`epto.stability`, :mod:`epto.log`, :mod:`epto.spark`, :mod:`epto.transports`.
Modules whose names start with an underscore are private.

The node configuration, state-machine, token ring, sealing and signing names
load on first use (``_LAZY`` below), so that ``import epto`` stays cheap
(docs/benchmarks.md#import-time).
"""

# The engines' configuration
from .epidemic._config import ClockKind as ClockKind
from .epidemic._config import Config as Config
from .epidemic._config import OrderingKind as OrderingKind
from .epidemic._cyclon import CyclonConfig as CyclonConfig
from .epidemic._params import Parameters as Parameters
from .epidemic._params import derive_parameters as derive_parameters
from .wire._limits import Limits as Limits

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
from ._errors import MemberRunningError as MemberRunningError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._errors import SupersededError as SupersededError

# isort: split
import typing as _typing

from ._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    # A node's configuration, whichever engine (opening one: epto.transports.open_node)
    from .endpoint import NodeConfig as NodeConfig

    # The state-machine layer (the rest of it: epto.rsm)
    from .rsm import StateMachine as StateMachine
    from .rsm import replicated as replicated

    # Group encryption and event signatures (the crypto extra, when used); files: epto.keys
    # Token-ring mode's configuration (the engine: epto.tokenring)
    from .tokenring import TokenRingConfig as TokenRingConfig
    from .wire._seal import GroupKey as GroupKey
    from .wire._signing import EventSigner as EventSigner
    from .wire._signing import SignatureVerifier as SignatureVerifier
    from .wire._signing import VerifierStatistics as VerifierStatistics

# Names loaded on first use (PEP 562), so that ``import epto`` does not load
# the token ring (half of its import time), the endpoints, the state-machine
# layer or the sealing and signing code an application may not use. The
# name maps to the module that defines it.
_LAZY: dict[str, str] = {
    "NodeConfig": ".endpoint",
    "StateMachine": ".rsm",
    "replicated": ".rsm",
    "GroupKey": ".wire._seal",
    "EventSigner": ".wire._signing",
    "SignatureVerifier": ".wire._signing",
    "VerifierStatistics": ".wire._signing",
    "TokenRingConfig": ".tokenring",
}
# Submodules that ``import epto`` used to load, so ``epto.tokenring`` works
# without ``import epto.tokenring`` as before.
_LAZY_SUBMODULES = frozenset({"tokenring"})


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, _LAZY_SUBMODULES)


__version__ = "0.1.0.dev0"

__all__ = [
    "ClockKind",
    "Config",
    "ConfigurationError",
    "CyclonConfig",
    "Delivery",
    "DeliveryTag",
    "EptoError",
    "Event",
    "EventId",
    "EventSigner",
    "GroupKey",
    "Limits",
    "LocalProtocolError",
    "MemberRunningError",
    "NodeConfig",
    "OrderingKind",
    "Parameters",
    "ProcessId",
    "RemoteProtocolError",
    "SignatureVerifier",
    "StateMachine",
    "SupersededError",
    "TokenRingConfig",
    "VerifierStatistics",
    "derive_parameters",
    "replicated",
]
