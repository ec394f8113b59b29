"""The defaults every entry point shares, defined once.

The library (:class:`epto.Config`, :meth:`epto.Config.for_group`,
:func:`epto.params.derive_parameters`, :class:`epto.transports.NodeConfig`)
and the command line (``epto node``, ``epto params``, ``epto simulate``)
import these, so that a group run with no options has the fanout and TTL that
``epto params`` prints (docs/parameters.md, *Defaults*).
"""

from typing import Final, Literal

DEFAULT_CLOCK: Final[Literal["logical", "global"]] = "logical"
"""The logical clock (Algorithm 4) assumes nothing about the members' clocks;
its TTL is twice the global clock's."""

DEFAULT_ROUND_INTERVAL: Final = 0.125
"""Seconds between two rounds of a node (the simulator's 125 ticks of a
millisecond are the same length)."""

DEFAULT_C: Final = 2.0
"""The safety constant ``c`` of the TTL (Lemmas 3 and 4)."""
