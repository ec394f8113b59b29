"""What a peer may claim: the checks every token-ring message passes before it
reaches the protocol (:meth:`TokenRingProcess.receive`).

The frame decoders already bound sizes (lists, payloads); these checks bound
the *values* of well-formed messages, so that no claim can make a member
walk, allocate or count beyond what the bytes it received justify:

* **who may send what**: every kind but ``Join`` comes from members of the
  current view only (a joining process hears its contacts), and is dropped
  as ``not-a-member`` otherwise, before the failure detector even hears the
  sender, so made-up identities cost no state. A heartbeat of an older
  configuration from a non-member is answered, rate-limited, with ours (a
  member removed while it was away learns it that way). At most
  :data:`MAX_JOINERS` identities wait to join at once, each forgotten unless
  it asks again within ``4 * change_timeout``, and a view change admits
  newcomers only while every member is heard, at most a minority of the
  view at once (``_membership.wanted_change``);
* **a broadcast comes from its source**: the events of a ``Data`` or
  ``DataBatch`` are the sender's own (``bad-source``); others' events travel
  only in catch-ups and consensus messages;
* **numbers stay far from the end of their range**: instances, hops, ballot
  rounds and positions above :data:`MAX_CLAIM` (2**48), a token's
  per-source event counters above :data:`MAX_EVENT_SEQ` (2**63) and
  incarnations above ``MAX_INCARNATION`` (2**31 - 1) are refused as
  ``out-of-range``: an honest group does not reach them in centuries, and
  ``+ 1`` on any accepted value can never overflow the wire's 64 bits;
* **token states are consistent** (``bad-state``): ``low <= stable <=
  next_seq``; the batches are consecutive, from ``low`` to ``next_seq``; the
  window holds at most ``max_unstable_messages + max_batch`` messages. The
  work a state causes (learning its batches, advancing stability, walking
  what is missing) is then bounded by the ids it carries, and fetches never
  span more than ``FETCH_SPAN`` positions whatever a state or heartbeat
  claims (``_fetch``).

What a member of the view (with the group key, in a sealed group) can still
do is in docs/security.md: the protocol tolerates crashes, not lies.
"""

from __future__ import annotations

from .._event import ProcessId
from .._incarnation import MAX_INCARNATION
from ._config import TokenRingConfig
from ._messages import (
    Accept,
    Accepted,
    Catchup,
    Data,
    DataBatch,
    Decided,
    Delays,
    Fetch,
    Heartbeat,
    Join,
    Latencies,
    Message,
    Nack,
    Order,
    Prepare,
    Promise,
    RingConfig,
    Token,
    TokenAck,
    TokenState,
)

MAX_CLAIM = 1 << 48
"""Largest instance, hop, ballot round or sequence number accepted from a peer."""

MAX_EVENT_SEQ = 1 << 63
"""Largest event ``seq`` accepted in a token's per-source counters: an
event's ``seq`` holds its source's incarnation in its high bits
(:func:`epto._incarnation.first_seq`), so it is far above positions."""

MAX_JOINERS = 16
"""Identities waiting to join that a member remembers at once."""

_OPEN_KINDS = (Join, Decided)


def refusal(
    cfg: TokenRingConfig,
    config: RingConfig,
    contacts: tuple[ProcessId, ...],
    sender: ProcessId,
    message: Message,
) -> str | None:
    """Why ``message`` from ``sender`` must be dropped, or None, for a process
    configured by ``cfg``, in the view ``config``, that asks ``contacts`` to
    join (a joining process)."""
    if not isinstance(message, _OPEN_KINDS) and not _may_send(config, contacts, sender):
        return "not-a-member"
    if isinstance(message, Data):
        return None if message.event.source == sender else "bad-source"
    if isinstance(message, DataBatch):
        return None if all(e.source == sender for e in message.events) else "bad-source"
    if isinstance(message, Token | Order):
        return _state(cfg, message.state)
    if isinstance(message, Decided):
        # A member hears decisions from the members it decides with; a
        # joining process from the members it was pointed at (or heard of
        # from them).
        if config.members:
            if sender not in config.members:
                return "not-a-member"
        elif sender not in contacts:
            return "not-a-member"
        return _config(cfg, message.config)
    if isinstance(message, Prepare | Nack | Accept | Accepted | Promise):
        if message.instance > MAX_CLAIM or message.ballot[0] > MAX_CLAIM:
            return "out-of-range"
        if isinstance(message, Nack) and message.promised[0] > MAX_CLAIM:
            return "out-of-range"
        if isinstance(message, Accept):
            return _config(cfg, message.value)
        if isinstance(message, Promise):
            if message.accepted is not None:
                ballot, value = message.accepted
                if ballot[0] > MAX_CLAIM:
                    return "out-of-range"
                if (why := _config(cfg, value)) is not None:
                    return why
            if message.report.delivered > MAX_CLAIM:
                return "out-of-range"
            # A promise that accepted a value leaves its window out.
            report = message.report.state
            return _state(cfg, report, windowless=message.accepted is not None)
        return None
    if isinstance(message, TokenAck):
        return "out-of-range" if message.hop > MAX_CLAIM else None
    if isinstance(message, Heartbeat):
        if max(message.instance, message.delivered, message.sent, message.received) > MAX_CLAIM:
            return "out-of-range"
        return "out-of-range" if message.incarnation > MAX_INCARNATION else None
    if isinstance(message, Join):
        return "out-of-range" if message.incarnation > MAX_INCARNATION else None
    if isinstance(message, Fetch):
        return "out-of-range" if max(message.start, message.end) > MAX_CLAIM else None
    if isinstance(message, Latencies | Delays):
        # Rows of optimistic delivery: one entry per member at most, values
        # already bounded by the decoder (finite, in [0, 1e9]).
        if message.instance > MAX_CLAIM:
            return "out-of-range"
        if isinstance(message, Delays) and message.epoch > MAX_CLAIM:
            return "out-of-range"
        if isinstance(message, Latencies) and max(message.plan) > MAX_CLAIM:
            return "out-of-range"
        if len(message.row) > len(config.members):
            return "bad-row"
        return None
    if isinstance(message, Catchup):
        if max(message.stable, message.oldest) > MAX_CLAIM:
            return "out-of-range"
        if any(seq > MAX_CLAIM for seq, _ in message.entries):
            return "out-of-range"
    return None


def _may_send(config: RingConfig, contacts: tuple[ProcessId, ...], sender: ProcessId) -> bool:
    if sender in config.members:
        return True
    # A joining process hears the members it was pointed at before it is in
    # a view with them.
    return not config.members and sender in contacts


def _config(cfg: TokenRingConfig, config: RingConfig) -> str | None:
    if config.instance > MAX_CLAIM or config.view > MAX_CLAIM:
        return "out-of-range"
    if not config.core or not set(config.core) <= set(config.members):
        return "bad-state"
    if any(seq > MAX_CLAIM for seq, _ in config.events):
        return "out-of-range"
    if any(seq > MAX_CLAIM for _, seq, _ in config.starts):
        return "out-of-range"
    if any(inc > MAX_INCARNATION for _, inc in config.incarnations):
        return "out-of-range"
    return _state(cfg, config.state)


def _state(cfg: TokenRingConfig, state: TokenState, *, windowless: bool = False) -> str | None:
    if max(state.instance, state.hop, state.next_seq) > MAX_CLAIM:
        return "out-of-range"
    if not state.low <= state.stable <= state.next_seq:
        return "bad-state"
    if state.next_seq - state.low > cfg.max_unstable_messages + cfg.max_batch:
        return "bad-state"
    at = state.low
    for batch in state.batches:
        if batch.first != at or not batch.ids:
            return "bad-state"
        at = batch.end
    if at != state.next_seq and not (windowless and not state.batches):
        return "bad-state"
    if any(seq > MAX_EVENT_SEQ for _, seq in state.sources):
        return "out-of-range"
    return None
