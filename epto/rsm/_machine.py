"""What an application declares: a :class:`StateMachine` whose commands are
methods marked :func:`replicated`, encoded by a :class:`CommandCodec` (JSON by
default: no pickle, nothing a peer sends is ever executed as code).

Rules:

* A command is ``(name, args)``: the name of a method marked
  :func:`replicated` and its positional arguments, values the codec encodes
  (JSON: ``None``, booleans, numbers, strings, lists, string-keyed objects).
* Applying runs the method on the machine at every replica, in the total
  order. A method that raises is applied as a failure at every replica alike
  (whatever it changed before raising stays changed everywhere, since every
  replica runs the same code on the same state): the result is a
  :class:`CommandFailed` naming the exception type and its message.
* A command the machine does not declare, or that the codec cannot decode,
  is a failure too (``"UnknownCommand"``, ``"BadCommand"``): a peer cannot
  make a replica call anything but a replicated method.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import attrs

from .._errors import ConfigurationError

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "_epto_replicated"


def replicated(method: F) -> F:
    """Mark a method of a :class:`StateMachine` as a replicated command.

    Calling it on the machine applies it locally only (what a replica does
    when the command is delivered); to replicate it, submit it through the
    replica's driver (``await group.call.<name>(...)``, docs/rsm.md)."""
    setattr(method, _MARK, True)
    return method


class StateMachine:
    """Base class of a replicated state machine.

    Subclasses declare commands with :func:`replicated` and implement
    :meth:`snapshot` and :meth:`restore` (state transfer and compaction). The
    methods must be deterministic: same state and arguments, same result and
    same new state, at every replica (no clocks, no randomness, no I/O).
    """

    def snapshot(self) -> bytes:
        """The whole state, as bytes that :meth:`restore` reads back."""
        raise NotImplementedError

    def restore(self, state: bytes) -> None:
        """Replace the whole state by one :meth:`snapshot` returned."""
        raise NotImplementedError

    @classmethod
    def commands(cls) -> frozenset[str]:
        """The names of the methods marked :func:`replicated`."""
        return frozenset(
            name
            for name in dir(cls)
            if not name.startswith("_") and getattr(getattr(cls, name, None), _MARK, False)
        )


@attrs.frozen(slots=True)
class CommandFailed:
    """The result of a command that raised (at every replica alike)."""

    error: str
    """The exception's type name (or ``UnknownCommand``, ``BadCommand``)."""
    message: str


class CommandCodec(Protocol):
    """Turns commands into payload bytes and back; results are not sent."""

    def encode(self, name: str, args: tuple[Any, ...]) -> bytes: ...

    def decode(self, data: bytes) -> tuple[str, tuple[Any, ...]]:
        """Raise ``ValueError`` on bytes it cannot read."""
        ...


class JsonCodec:
    """Commands as compact JSON arrays ``[name, arg, ...]`` in UTF-8."""

    def encode(self, name: str, args: tuple[Any, ...]) -> bytes:
        try:
            return json.dumps([name, *args], separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"command {name}: arguments JSON cannot encode: {exc}"
            ) from None

    def decode(self, data: bytes) -> tuple[str, tuple[Any, ...]]:
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ValueError(f"not a JSON command: {exc}") from None
        if not isinstance(value, list) or not value or not isinstance(value[0], str):
            raise ValueError("a command is a JSON array starting with its name")
        return value[0], tuple(value[1:])


def apply_command(
    machine: StateMachine, commands: frozenset[str], codec: CommandCodec, data: bytes
) -> Any:
    """Apply one command to ``machine``; its result, or a :class:`CommandFailed`."""
    try:
        name, args = codec.decode(data)
    except ValueError as exc:
        return CommandFailed("BadCommand", str(exc)[:200])
    if name not in commands:
        return CommandFailed("UnknownCommand", name[:100])
    try:
        return getattr(machine, name)(*args)
    except Exception as exc:  # applied as a failure at every replica alike
        return CommandFailed(type(exc).__name__, str(exc)[:200])
