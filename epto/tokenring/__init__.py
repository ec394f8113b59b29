"""Token-ring total order for small groups: a moving sequencer with a
two-level membership (core members hold the token, suspected members become
external and keep receiving), view changes agreed by consensus.

See docs/token-ring.md.
"""

from ._config import AUTO_TOKEN_RING_MAX_GROUP as AUTO_TOKEN_RING_MAX_GROUP
from ._config import TokenRingConfig as TokenRingConfig
from ._config import choose_mode as choose_mode
from ._durable import decode_durable as decode_durable
from ._durable import encode_durable as encode_durable
from ._frames import TOKEN_RING_KINDS as TOKEN_RING_KINDS
from ._frames import token_ring_registry as token_ring_registry
from ._membership import Role as Role
from ._messages import RingConfig as RingConfig
from ._messages import TokenState as TokenState
from ._process import TokenRingProcess as TokenRingProcess
from ._process import TokenRingStatistics as TokenRingStatistics
from ._split import splitting_registry as splitting_registry
from ._stats import OptimisticStatistics as OptimisticStatistics

__all__ = [
    "AUTO_TOKEN_RING_MAX_GROUP",
    "TOKEN_RING_KINDS",
    "OptimisticStatistics",
    "RingConfig",
    "Role",
    "TokenRingConfig",
    "TokenRingProcess",
    "TokenRingStatistics",
    "TokenState",
    "choose_mode",
    "decode_durable",
    "encode_durable",
    "splitting_registry",
    "token_ring_registry",
]
