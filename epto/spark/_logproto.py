"""The log-read protocol: what a member serves (:mod:`epto.spark._logserver`)
and the Spark source asks (:mod:`epto.spark._network`).

Over one TCP connection (integers big-endian unless said otherwise), framed
as the sink's gateway protocol (:mod:`epto.spark._client`) is:

* the server opens with ``HELLO``: ``b"EPTOLOG1"``, the largest frame it
  sends (u32), the most records one request may span (u32) and a fresh
  16-byte challenge;
* every later message either way is a frame: length (u32) then body. The
  client's first frame is ``b"H"`` and ``HMAC-SHA256(token, b"epto log read"
  + challenge)``; the server answers ``b"O"``, or ``b"R"`` and a reason and
  closes. The token itself never crosses the network, and an answer
  overheard on one connection is worth nothing on the next;
* requests: ``b"L"`` (the logs the server holds: a JSON object
  ``{"<node>": [first, end, durable_end or null]}``); ``b"K"`` node, start,
  limit (u64 each: the in-order records' keys from ``start``); ``b"F"``
  node, lo, hi (u64 each: the records ``lo <= index < hi``, what is missing
  skipped);
* answers to ``K``: ``b"K"`` frames, each a u32 count ``n`` then ``n``
  indices, timestamps, sources and seqs (little-endian u64 arrays), then
  ``b"Z"``, the end of the scan (u64) and whether the limit stopped it (u8);
  to ``F``: ``b"D"`` frames, each a u32 count ``n``, ``n`` frame positions
  (little-endian u32) and the bytes of a stretch of one segment they point
  into, then ``b"Z"`` and the index the answer reached (u64: a request
  spanning more than the server's range is answered up to that, and the
  client asks again from there). A request the logs cannot answer (an
  unknown node, a damaged segment) gets ``b"E"`` and one line, and the
  connection stays usable.

A token is derived from the group key when none is given
(:func:`group_token`), so whoever holds the group's key may read its logs.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

HELLO_MAGIC = b"EPTOLOG1"
HELLO = struct.Struct(">8sII16s")
FRAME_LEN = struct.Struct(">I")
REQUEST = struct.Struct(">QQQ")
COUNT = struct.Struct(">I")
DONE = struct.Struct(">QB")
NEXT = struct.Struct(">Q")
PROOF = 32
"""Bytes of the answer to the challenge (an HMAC-SHA256)."""
MAX_REQUEST = 1 + max(REQUEST.size, PROOF)
"""Bytes of the largest frame a client sends."""
MAX_REASON = 512
CONTEXT = b"epto log read"
MAX_TOKEN = 256
"""Bytes of a token (as the sink gateway's)."""


def answer(token: bytes, challenge: bytes) -> bytes:
    """The client's proof that it holds ``token``."""
    return hmac.new(token, CONTEXT + challenge, hashlib.sha256).digest()


def group_token(secret: bytes) -> bytes:
    """The log-read token of a group whose key's secret is ``secret``."""
    return hmac.new(secret, b"epto log-read token v1", hashlib.sha256).hexdigest().encode()
