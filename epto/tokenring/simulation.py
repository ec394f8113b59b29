"""Token-ring groups run in the library's one virtual-time network:
:class:`epto.transports.simulation.TokenRingCluster` (see docs/simulation.md).
This module only forwards that name."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "TokenRingCluster":
        from epto.transports.simulation import TokenRingCluster

        return TokenRingCluster
    raise AttributeError(name)
