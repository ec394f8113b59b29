"""Exceptions, split by who is at fault (the h11 model).

* :class:`LocalProtocolError`: the caller used the library wrongly (a bad
  configuration, broadcasting on a closed process). Fix the calling code.
* :class:`RemoteProtocolError`: bytes or messages from the network were
  malformed, oversized or hostile. A node counts these and carries on; they
  are never a crash.
"""

from __future__ import annotations


class EptoError(Exception):
    """Base class of every exception the library raises on purpose."""


class LocalProtocolError(EptoError):
    """The local caller did something the library does not allow."""


class ConfigurationError(LocalProtocolError, ValueError):
    """A configuration value is out of range; the message names the field."""


class RemoteProtocolError(EptoError):
    """Input from the network could not be accepted.

    ``fault`` is a short stable label (``"truncated"``, ``"oversized"``,
    ``"bad-magic"``, ...) that nodes use as the key of their rejection counters.
    """

    def __init__(self, message: str, *, fault: str = "malformed") -> None:
        super().__init__(message)
        self.fault = fault


class MemberRunningError(LocalProtocolError):
    """Another live process runs this member: the lock on its data directory
    is held (docs/node.md, *Restart*). Two processes with one id would give
    the group two members under one name; the second is refused at start."""


class SupersededError(LocalProtocolError):
    """A later incarnation of this member runs elsewhere (its events reached
    this process), so this process stops: the group now counts the later one
    as the member (docs/node.md, *Restart*)."""
