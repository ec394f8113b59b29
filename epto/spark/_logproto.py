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
:func:`network_options` reads the source's ``epto.servers`` and token options.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping

from .._errors import ConfigurationError

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


_TOKEN_OPTIONS = ("epto.token", "epto.tokenFile", "epto.groupKeyFile")


def network_options(opts: Mapping[str, str]) -> tuple[tuple[str, ...], bytes]:
    """``epto.servers`` and the token of its log servers (read on the driver)."""
    given = [name for name in _TOKEN_OPTIONS if name.lower() in opts]
    text = opts.get("epto.servers")
    if text is None:
        if given:
            raise ConfigurationError(f"{given[0]} applies with epto.servers only")
        return (), b""
    servers = tuple(s.strip() for s in text.split(",") if s.strip())
    if not servers:
        raise ConfigurationError(f"epto.servers must list host:port,... got {text!r}")
    for address in servers:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(f"epto.servers: {address!r} is not host:port")
    if len(given) != 1:
        raise ConfigurationError(
            "epto.servers needs one of epto.token, epto.tokenFile or epto.groupKeyFile"
            + (f" (got {', '.join(given)})" if given else "")
        )
    name = given[0]
    value = opts[name.lower()]
    if name == "epto.token":
        token = value.encode()
    else:
        from .. import keys
        from ..wire._keys import _read

        try:
            if name == "epto.tokenFile":
                token = _read(value, secret=True).strip()
            else:
                token = group_token(keys.load_group_key(value).secret)
        except OSError as exc:
            raise ConfigurationError(f"{name}: {value}: {exc.strerror or exc}") from None
    if not 1 <= len(token) <= MAX_TOKEN:
        raise ConfigurationError(f"{name}: a token is 1 to {MAX_TOKEN} bytes, got {len(token)}")
    return servers, token
