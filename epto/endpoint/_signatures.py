"""Event signatures for every engine, built in one place.

A signed group (docs/security.md) gives every member its Ed25519 private
key (``signing_key``) and the roster of the members' public keys
(``roster``). Every endpoint builds its signing and its checking here, and
hands every engine the same two hooks:

* ``signer(event) -> signature``: this member's events (EpTO's events as
  its process creates them, the token ring's broadcasts, an atoms node's
  publications) are signed where they are made;
* ``verifier(event) -> fault | None``: every event that arrives is checked
  against the roster before the engine orders it; a refused one is dropped
  and counted under the same names in every engine: ``bad-signature``,
  ``unsigned``, ``unknown-source``, ``altered``, ``equivocation``.

EpTO's balls are checked as the codec decodes them (its ``ball_filter``,
the same verifier: a ball's events before the process sees any); the
stream engines check each event where it enters the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._event import Event, ProcessId
from ..wire._signing import EventSigner, SignatureVerifier


class Signatures:
    """The signing and the checking of one member's events (either may be off)."""

    __slots__ = ("signer", "verifier")

    def __init__(
        self,
        pid: ProcessId,
        signing_key: bytes | None,
        roster: Mapping[ProcessId, bytes] | None,
    ) -> None:
        self.signer: Callable[[Event], bytes] | None = (
            EventSigner(pid, signing_key).signature if signing_key is not None else None
        )
        """The signing hook, or None when this member does not sign."""
        self.verifier: SignatureVerifier | None = (
            SignatureVerifier(roster) if roster is not None else None
        )
        """The roster's verifier, or None when events are not checked."""

    @property
    def check(self) -> Callable[[Event], str | None] | None:
        """The checking hook (``verifier.check``), or None."""
        return self.verifier.check if self.verifier is not None else None
