"""What an engine's order promises the layers above it, as named properties.

An application layer (a replicated state machine, say) must not branch on
the engine's name: it asks what the order it runs on promises, once, and
each decision names the promise it rests on. Two promises differ between
the engines today:

* **positions**: every delivery has a position, and a member delivers the
  positions one after another without a gap (the token ring). A member that
  finds a gap fetches what is missing; a state is identified by its
  position. Without it (EpTO) deliveries follow a timestamp order whose
  cuts compare, an event may be missed for good (a hole), and a member
  never delivers below what it delivered already, so a state short of
  that is refused.
* **view**: the members agree on a view (who is in the group, the quorum, a
  member's role; joining is an admission by the group). Without it (EpTO),
  a majority is counted over the replicas the application names, and
  diverged replicas are resolved by that majority.
"""

from __future__ import annotations

import attrs

from .._errors import ConfigurationError
from ._config import NodeConfig

__all__ = ["Ordering", "ordering_of"]


@attrs.frozen
class Ordering:
    """The promises of one engine's order (see the module's docstring)."""

    positions: bool
    """Deliveries are numbered positions without gaps."""
    view: bool
    """The members agree on a view: membership, quorum, roles, admission."""


_VIEW_SYNCHRONOUS = Ordering(positions=True, view=True)
_EPIDEMIC = Ordering(positions=False, view=False)


def ordering_of(config: NodeConfig) -> Ordering:
    """What the engine ``config`` runs (:meth:`NodeConfig.resolved_mode`)
    promises: the token ring numbers its deliveries in a view; EpTO promises
    neither. Sequencing atoms deliver to the groups a message is addressed
    to, which no layer above builds on yet: :class:`epto.ConfigurationError`."""
    mode = config.resolved_mode()
    if mode == "token-ring":
        return _VIEW_SYNCHRONOUS
    if mode == "epto":
        return _EPIDEMIC
    raise ConfigurationError(f"no application layer runs on mode={mode!r} yet")
