"""The replicated text editor's server: one replica of a
:class:`~epto.apps.text.TextDocument` and the browser pages that edit it
(docs/editor.md).

::

    async with EditorServer(node_config, EditorConfig(http="127.0.0.1:8080")) as server:
        print(server.url)          # the page
        await trio.sleep_forever()

Rules:

* **One replica, many pages**: the server runs a
  :class:`~epto.services.trio_rsm.ReplicatedNode` of the document and
  serves the page (``epto/apps/editor_static/index.html``) and its WebSocket
  (``/ws``) on one HTTP port. Each page is a :class:`epto.apps._editor.PageSession`:
  its edits are rebased over what was pushed to it since the revision they
  were made on and become the document's local edits; every change of the
  local view (remote operations, other pages' edits) is pushed to the pages
  that did not make it.
* **After every command applied** (``ReplicaConfig.on_applied``) and after
  every local edit, the server submits what the document wants sent (one
  operation in the order per author) and pushes the view's changes; all of it
  synchronously, in the task that changed the document.
* **A page's message is hostile input**
  (:func:`epto.apps._editor.parse_page_message`): bounded, parsed without
  raising, checked field by field, and the edit checked again against the
  view once rebased; a fault sends the page ``refused``, closes that page
  (counted in ``rejected`` as ``page-REASON``) and nothing else.
* **An operation of any size**: the document cuts what one event cannot
  carry into parts sized from the node's ``limits.max_payload_size``
  (``TextDocument(max_part_size=...)``).
* **Presence is outside the total order**: each replica sends its caret and
  selection (the last page's, or the bot's), anchored in the confirmed text,
  in a UDP datagram to the presence addresses it was given or learned
  (:class:`epto.apps._presence.Presence`) when it moves and every second;
  the others' cursors are brought into the local view whenever they are
  shown and expire after 5 s. Lost datagrams only delay a marker.
* **A page never edits a text that is not the group's**: while the replica is
  not ready (joining, restarting, fetching its state after a hole) its pages
  are told so (``{"type": "state", "ready": false}``, read only), an edit
  that still arrives is not taken, and each gets the whole text once it is
  ready. ``"unsaved"`` tells them the replica holds edits not yet in the
  group's order: what a crash of this process would lose.
* **A restarted replica** (``ReplicaConfig.data_dir``) numbers its
  operations above every earlier start's (the node's incarnation,
  :meth:`~epto.apps.text.TextDocument.number_from`).
* **Only the holders of the token open a page** (docs/editor.md, *Access*):
  the WebSocket handshake needs ``?token=`` (:attr:`EditorServer.token`,
  printed in :attr:`EditorServer.url`), the page's own ``Origin`` and a
  ``Host`` the replica answers to; refusals, malformed HTTP and dropped
  pages are counted in :attr:`EditorServer.rejected` and never raise.
* **Bounded pages**: at most ``max_pages``; what waits for one page at most
  ``page_queue_messages`` messages and ``page_queue_bytes`` characters, or
  the page is dropped (it reconnects and gets the whole text).
* **A replica that stops** (its server exits, or its node is excluded or
  superseded) tells its pages why (``{"type": "stopped"}``) before it closes
  their connections.
* **A bot** (``bot`` edits at ``bot_rate`` per second) types random words and
  deletes at random places, as a local user of this replica.

Size: one server, whose parts share the pages' table and the document:
the connection setup and its limits (credential, Origin, Host, queues), the
pages' messages, the fan-out of changes and presence. Each protocol it
speaks lives elsewhere (the page session and its messages in
:mod:`epto.apps._editor`, presence in :mod:`epto.apps._presence`, HTTP and
WebSocket in :mod:`epto.services._websocket`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import random
import secrets
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import attrs
import trio

from epto import ConfigurationError, GroupKey
from epto._incarnation import first_seq
from epto.apps._editor import (
    KEEP,
    PageCursor,
    PageFault,
    PageSession,
    StalePage,
    check_work,
    color_of,
    parse_page_message,
    random_edit,
)
from epto.apps._ot import Insert, Operation
from epto.apps._presence import Presence, presence_codec, presence_key
from epto.apps.text import MAX_PARTS, MIN_PART_SIZE, Change, TextDocument, transform_position
from epto.endpoint import Address, NodeConfig, parse_host_port
from epto.wire import GroupSealer

from ._rsm_config import ReplicaConfig, ReplicaNotReadyError
from ._websocket import Access, Refusal, WebSocket, WebSocketClosed, serve_http
from .trio_rsm import ReplicatedNode

__all__ = ["EditorConfig", "EditorServer", "editor_token"]

TOKEN_FILE = "editor-token"
"""The token kept in ``ReplicaConfig.data_dir`` (an unsealed replica's URL
stays the same across restarts)."""


def editor_token(group_key: GroupKey) -> str:
    """The page token of every replica of a sealed group: 24 URL-safe
    characters derived from the group key (HKDF-SHA256, info
    ``"epto-editor-token-v1"`` and the key id). It gives no way back to the
    key; rotating the key changes it."""
    import base64

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = b"epto-editor-token-v1" + bytes([group_key.key_id])
    hkdf = HKDF(algorithm=hashes.SHA256(), length=18, salt=None, info=info)
    return base64.urlsafe_b64encode(hkdf.derive(group_key.secret)).decode()


def _check_token(_instance: object, _attribute: object, value: str | None) -> None:
    if value is None:
        return
    if not 16 <= len(value) <= 256 or value.strip("-_" + _URL_SAFE):
        raise ConfigurationError(
            "EditorConfig.token must be 16 to 256 characters of A-Z, a-z, 0-9, '-' and '_'"
        )


_URL_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _at_least_one(_instance: object, attribute: Any, value: int) -> None:
    if value < 1:
        raise ConfigurationError(f"EditorConfig.{attribute.name} must be at least 1, got {value}")


@attrs.frozen(kw_only=True)
class EditorConfig:
    """How an :class:`EditorServer` serves its pages and shares its cursor."""

    http: Address = "127.0.0.1:0"
    """Where the page and its WebSocket are served."""
    presence: Address = "127.0.0.1:0"
    """UDP address of this replica's presence datagrams."""
    presence_peers: Mapping[int, Address] = attrs.field(factory=dict)
    """The other replicas' presence addresses."""
    name: str = ""
    """Shown next to this replica's cursor on the others' pages (default: ``replica ID``)."""
    replica: ReplicaConfig = attrs.field(factory=ReplicaConfig)
    horizon: int = 10_000
    """Operations of history kept (``TextDocument(horizon=...)``)."""
    bot: int = 0
    """Edits a bot types (0: no bot)."""
    bot_rate: float = 5.0
    """The bot's edits per second."""
    bot_seed: int | None = None
    token: str | None = attrs.field(default=None, validator=_check_token)
    """What a page must present to open the WebSocket (``?token=``). None:
    derived from the group key in a sealed group (:func:`editor_token`, the
    same at every replica), else kept in ``replica.data_dir`` (drawn at the
    first start), else drawn at start (``secrets.token_urlsafe(24)``)."""
    allowed_hosts: tuple[str, ...] = ()
    """``Host`` names (``name`` or ``name:port``) the WebSocket answers to
    besides IP addresses and ``localhost``: the names pages use to reach the
    replica (a TLS proxy's public name, a LAN name)."""
    max_pages: int = attrs.field(default=256, validator=_at_least_one)
    """Pages connected at once; more are refused (``503``, ``too-many-pages``)."""
    page_queue_messages: int = attrs.field(default=500, validator=_at_least_one)
    """Messages queued for one page at most; a page that lets more pile up
    (it does not read) is dropped (``slow-page``): it reconnects and gets the
    whole text."""
    page_queue_bytes: int = attrs.field(default=256 * 1024, validator=_at_least_one)
    """Characters queued for one page at most, beside the message being
    written (one message always fits: a reset of a long text)."""


class _Outbox:
    """What waits to be written to one page (bounded by
    ``EditorConfig.page_queue_messages`` and ``page_queue_bytes``)."""

    __slots__ = ("chars", "scope", "send")

    def __init__(self, send: trio.MemorySendChannel[str], scope: trio.CancelScope) -> None:
        self.send = send
        self.scope = scope
        self.chars = 0


class EditorServer:
    """One replica of the text and the web pages that edit it."""

    def __init__(self, node: NodeConfig, config: EditorConfig | None = None) -> None:
        self.config = cfg = config if config is not None else EditorConfig()
        self.pid = node.pid
        self.doc = TextDocument(
            author=node.pid, horizon=cfg.horizon, max_part_size=_part_size(node, cfg.replica)
        )
        self.node = ReplicatedNode(self.doc, node, attrs.evolve(cfg.replica, on_applied=self._pump))
        self.name = cfg.name or f"replica {node.pid}"
        sealer = None
        if node.group_key is not None:
            # Its own key and counter: never a nonce of the group's frames.
            sealer = GroupSealer(
                presence_key(node.group_key),
                counter_start=int(time.time() * 1e6),
                rng=random.Random(secrets.randbits(64)),
            )
        self.presence = Presence(
            node.pid,
            cfg.presence_peers,
            codec=presence_codec(node.group, sealer),
            peers=cfg.presence_peers,
            sealed=sealer is not None,  # the seal proves a member of the group
        )
        self.presence.locate = self.doc.locate
        self._pages: dict[PageSession, _Outbox] = {}
        # Pages that connected while the replica was joining: they get their
        # text (and may edit) once the replica is ready, not before.
        self._waiting: set[PageSession] = set()
        self._ready = False
        self._state_sent: tuple[bool, bool] | None = None
        """(ready, unsaved) as the pages were last told."""
        self._caret = (0, 0)
        self._caret_moved = trio.Event()
        self._udp: trio.socket.SocketType | None = None
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self.url = ""
        self.presence_address = ""
        self.bot_done = trio.Event()
        self.edits_sent = 0
        self.edits_refused = 0
        """Page edits not taken because the replica was not ready."""
        self.rejected: collections.Counter[str] = collections.Counter()
        """Refusals by reason: HTTP requests and handshakes refused, pages
        dropped (too slow, too many), page messages refused."""
        self.token = cfg.token or ""
        self.access = Access(token=cfg.token or secrets.token_urlsafe(24), hosts=cfg.allowed_hosts)
        """The handshake's checks (set again at start, with the token)."""
        """The pages' credential (known once started, see ``EditorConfig.token``)."""
        self._group_key = node.group_key
        self._connections = 0
        self._pages_told = False
        self._stopping: str | None = None
        """Why the replica stops, once it does: pages get it (``stopped``)."""
        self.stop_reason = ""
        """What the pages are told when the server exits normally (default:
        ``replica ID stopped``)."""

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            # The pages live outside the node's tasks: when the node stops
            # (excluded, superseded, a fault) they are still there to be told.
            pages = await stack.enter_async_context(trio.open_nursery())
            stack.callback(pages.cancel_scope.cancel)
            stack.push_async_exit(self._stop_pages)  # after the node stopped
            await stack.enter_async_context(self.node)
            stack.callback(self._begin_stop)  # before the node stops
            self.token = self.token or self._start_token()
            # Above every earlier start's operations: this start's event ids.
            self.doc.number_from(first_seq(self.node.node.incarnation))
            udp = self._udp = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
            stack.callback(udp.close)
            nursery = self._nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)  # runs first on the way out
            host, port = parse_host_port(self.config.http)
            serve = functools.partial(trio.serve_tcp, self._serve, port, host=host)
            listeners = await pages.start(serve)
            bound = listeners[0].socket.getsockname()
            self.url = f"http://{_url_host(bound[0])}:{bound[1]}/?token={self.token}"
            self.access = Access(token=self.token, hosts=self.config.allowed_hosts)
            host, port = parse_host_port(self.config.presence)
            await udp.bind((host, port))
            bound = udp.getsockname()
            self.presence_address = f"{bound[0]}:{bound[1]}"
            nursery.start_soon(self._presence_receiver)
            nursery.start_soon(self._presence_sender)
            nursery.start_soon(self._watch_ready)
            if self.config.bot:
                nursery.start_soon(self._bot)
            else:
                self.bot_done.set()
            self._pump()
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    def _start_token(self) -> str:
        """``EditorConfig.token`` is None: derived from the group key, kept
        in the data directory, or drawn."""
        if self._group_key is not None:
            return editor_token(self._group_key)
        data_dir = self.config.replica.data_dir
        if not data_dir:
            return secrets.token_urlsafe(24)
        path = Path(data_dir) / TOKEN_FILE
        with contextlib.suppress(FileNotFoundError):
            token = path.read_text().strip()
            with contextlib.suppress(ConfigurationError):
                _check_token(None, None, token)
                return token
        token = secrets.token_urlsafe(24)
        temporary = path.with_name(path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        return token

    def _begin_stop(self) -> None:
        """The node is about to stop: take no more edits nor pages."""
        if self._stopping is None:
            self._stopping = self.stop_reason or f"replica {self.pid} stopped"

    async def _stop_pages(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """The node stopped (``exc``: why, if it did not stop by itself):
        tell every page (``stopped``) and let it go, within a second."""
        self._begin_stop()
        reason = _stop_reason(exc, self.pid) or self._stopping
        self._stopping = reason
        text = json.dumps({"type": "stopped", "reason": reason})
        self._pages_told = True  # nothing more after it
        for outbox in self._pages.values():
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                outbox.send.send_nowait(text)  # its room is kept for this one
            outbox.send.close()  # the writer ends after it, and so does the page
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            while self._pages:
                await trio.sleep(0.01)
        return False

    @property
    def pages(self) -> int:
        """Pages connected (at most ``EditorConfig.max_pages``)."""
        return len(self._pages)

    @property
    def queued(self) -> int:
        """Messages waiting to be written to the pages, all pages together
        (at most ``page_queue_messages`` per page, plus ``stopped``)."""
        return sum(o.send.statistics().current_buffer_used for o in self._pages.values())

    @property
    def ready(self) -> bool:
        """The replica holds the group's text (``ReplicatedNode.ready``, no
        hole since) and is not stopping."""
        node = self.node
        return (
            self._stopping is None and node.ready and node.replica.ready and node.node is not None
        )

    # -- the document ----------------------------------------------------------------

    def _pump(self) -> None:
        """Submit what the document wants sent; push the view's changes."""
        if self.ready:
            for args in self.doc.take_outgoing():
                try:
                    self.node.submit("edit", *args)
                except ReplicaNotReadyError:
                    # A token-ring member out of the view since: its state is
                    # fetched again when it is back, which ends the in-flight
                    # operation (TextDocument.restore).
                    break
                self.edits_sent += 1
        self._fan_out(exclude=None)

    def _fan_out(self, exclude: PageSession | None) -> None:
        ready = self.ready
        if ready != self._ready:
            self._ready = ready
            if not ready:  # a hole found, a fetch: every page waits for the text
                self._waiting.update(self._pages)
        changes = self.doc.take_changes()
        reset: set[PageSession] = set()
        if self._waiting and ready:
            # The whole text, which holds every change taken above.
            reset, self._waiting = self._waiting, set()
            for page in reset:
                self._send(page, page.reset(self.doc.view))
        if changes:
            self._push(changes, skip=reset | {exclude} if exclude else reset)
        self._send_state()

    def _push(self, changes: list[Change], skip: set[PageSession]) -> None:
        for change in changes:
            pos, end = self._caret
            self._caret = (transform_position(pos, change.op), transform_position(end, change.op))
        restored = any(c.remote and not c.op for c in changes)
        for page in list(self._pages):
            if page in skip or page in self._waiting:
                continue
            if restored or page.behind() + len(changes) > KEEP:
                # A state transfer (or a page that stopped building on what it
                # is sent): the whole text.
                self._send(page, page.reset(self.doc.view))
                continue
            for change in changes:
                self._send(page, page.push(change.op))
        self._send_all(self.presence.message())

    def _state_message(self) -> dict[str, Any]:
        ready, unsaved = self._state_sent or (self._ready, False)
        return {"type": "state", "ready": ready, "unsaved": unsaved}

    def _send_state(self) -> None:
        """Tell the pages when ``(ready, unsaved)`` changed."""
        state = (self._ready, self.doc.pending() > 0)
        if state != self._state_sent:
            self._state_sent = state
            self._send_all(self._state_message())

    async def _watch_ready(self) -> None:
        """Readiness also changes with no command applied (a hole, a fetch)."""
        while True:
            await trio.sleep(0.05)
            if self.ready != self._ready:
                self._pump()

    def _send(self, page: PageSession, message: dict[str, Any]) -> None:
        self._send_text(page, json.dumps(message))

    def _send_text(self, page: PageSession, text: str) -> None:
        """Queue ``text`` for ``page``; a page whose queue is full (it does
        not read) is dropped: it reconnects and gets the whole text."""
        outbox = self._pages.get(page)
        if outbox is None or self._pages_told:
            return
        cfg = self.config
        queued = outbox.send.statistics().current_buffer_used
        if queued >= cfg.page_queue_messages or (
            queued and outbox.chars + len(text) > cfg.page_queue_bytes
        ):
            self.rejected["slow-page"] += 1
            self._drop(page)
            return
        try:
            outbox.send.send_nowait(text)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._drop(page)
            return
        outbox.chars += len(text)

    def _drop(self, page: PageSession) -> None:
        outbox = self._pages.pop(page, None)
        if outbox is not None:
            outbox.send.close()
            outbox.scope.cancel()

    def _send_all(self, message: dict[str, Any]) -> None:
        text = json.dumps(message)  # one string, shared by every queue
        for page in list(self._pages):
            self._send_text(page, text)

    def local_edit(self, op: Operation) -> None:
        """An edit of the local view by this replica's user (a bot, a test).
        Refused (:class:`~epto.services.trio_rsm.ReplicaNotReadyError`)
        while the replica is not ready: it would be an edit of a text that is
        not the group's; :class:`ValueError` (nothing changes) for an edit
        outside the view or one that would make it longer than the
        document's ``max_length``."""
        if not self.ready:
            raise ReplicaNotReadyError("the replica is not ready: its text is not the group's yet")
        self.doc.local_edit(op)
        self._pump()

    # -- the pages ---------------------------------------------------------------------

    def _files(self) -> dict[str, tuple[bytes, str]]:
        page = resources.files("epto.apps").joinpath("editor_static", "index.html").read_bytes()
        return {"/": (page, "text/html; charset=utf-8")}

    async def _serve(self, stream: trio.SocketStream) -> None:
        if self._connections >= self.config.max_pages + 64:
            # Connections not yet pages (heads being read, files being sent)
            # are bounded too: the next ones are answered at once.
            self.rejected["too-many-connections"] += 1
            with trio.move_on_after(1), contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(_BUSY)
            await stream.aclose()
            return
        self._connections += 1
        try:
            await serve_http(
                stream, self._files(), self._page, admit=self._admit, rejected=self.rejected
            )
        finally:
            self._connections -= 1

    def _admit(self, target: str, headers: Mapping[str, str]) -> Refusal | None:
        """A WebSocket handshake: the credential, the Origin and the Host
        (:class:`~epto.services._websocket.Access`), then room for a page."""
        refusal = self.access.check(target, headers)
        if refusal is not None:
            return refusal
        if self._stopping is not None:
            return 503, "stopping"
        if len(self._pages) >= self.config.max_pages:
            return 503, "too-many-pages"
        return None

    async def _page(self, ws: WebSocket) -> None:
        if self._stopping is not None or len(self._pages) >= self.config.max_pages:
            # Admitted, but others took the room during the handshake.
            self.rejected["stopping" if self._stopping else "too-many-pages"] += 1
            await ws.aclose()
            return
        page = PageSession()
        # One more than the bound: room for the last message, ``stopped``.
        send, receive = trio.open_memory_channel[str](self.config.page_queue_messages + 1)
        scope = trio.CancelScope()
        outbox = _Outbox(send, scope)
        self._fan_out(exclude=None)  # the other pages first: this one gets the whole text
        self._pages[page] = outbox
        hello = {
            "type": "hello",
            "author": self.pid,
            "name": self.name,
            "color": color_of(self.pid),
        }
        self._send(page, hello)
        self._send(page, self._state_message())
        if self.ready:
            self._send(page, page.reset(self.doc.view))
        else:
            # A joining replica has no text yet: the page stays read only
            # ("loading") until the state transfer, instead of taking edits
            # that the transfer would drop.
            self._waiting.add(page)
        self._send(page, self.presence.message())
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, ws, receive, outbox)
                    while True:
                        try:
                            raw = await ws.receive()
                        except WebSocketClosed:
                            break
                        fault = self._from_page(page, raw)
                        if fault is not None:
                            await self._refuse(page, outbox, fault)
                            break
                    scope.cancel()
        finally:
            if self._pages.get(page) is outbox:
                del self._pages[page]
            self._waiting.discard(page)
            send.close()
            with trio.CancelScope(shield=True):
                await ws.aclose(timeout=1)

    async def _writer(
        self, ws: WebSocket, receive: trio.MemoryReceiveChannel[str], outbox: _Outbox
    ) -> None:
        try:
            async for text in receive:
                batch = [text]  # and whatever else waits: one write
                while len(batch) < 256:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                outbox.chars -= sum(map(len, batch))
                await ws.send_many(batch)
        except WebSocketClosed:
            pass
        outbox.scope.cancel()

    def _from_page(self, page: PageSession, raw: str) -> PageFault | None:
        """One page message; the fault that closes the page, if any."""
        try:
            message = parse_page_message(raw, max_length=self.doc.max_length)
            if isinstance(message, PageCursor):
                pos = page.position(message.base, message.pos)
                end = page.position(message.base, message.end)
                length = len(self.doc.view)
                self._caret = (min(pos, length), min(end, length))
                self._caret_moved.set()
                return None
            self._fan_out(exclude=None)  # a readiness change first
            if not self.ready:
                # Not the group's text: the edit is not taken. The page
                # was told (state), and gets the text once the replica is
                # ready; it reports the edit as not sent.
                self._waiting.add(page)
                self.edits_refused += 1
                return None
            check_work(message.op, len(self.doc.view))
            rebased, ack = page.receive(message.base, message.op)
            try:
                # Checked against the view: what every replica takes.
                self.doc.local_edit(rebased)
            except ValueError as exc:
                raise PageFault("edit-out-of-range", str(exc)) from None
            self._send(page, ack)
            self._fan_out(exclude=page)
            self._pump()
        except StalePage:
            pass  # made before a reset the page is being sent: dropped
        except PageFault as fault:
            return fault
        except Exception as exc:  # a page never stops the replica
            return PageFault("error", type(exc).__name__)
        return None

    async def _refuse(self, page: PageSession, outbox: _Outbox, fault: PageFault) -> None:
        """Count ``fault``, tell the page (``refused``) and let its writer
        send what is queued, within a second; the caller then closes it."""
        self.rejected[f"page-{fault.reason}"] += 1
        self._send(page, {"type": "refused", "reason": str(fault)[:200]})
        if self._pages.get(page) is outbox:
            del self._pages[page]
        self._waiting.discard(page)
        outbox.send.close()  # the writer ends once the queue is written
        with trio.move_on_after(1):
            await trio.sleep_forever()

    # -- presence ----------------------------------------------------------------------

    def _presence_datagram(self) -> bytes:
        version, pos = self.doc.anchor(self._caret[0])
        _, end = self.doc.anchor(self._caret[1])
        return self.presence.datagram(self.name, color_of(self.pid), version, pos, end)

    async def _presence_sender(self) -> None:
        assert self._udp is not None
        while True:
            with trio.move_on_after(1.0):
                await self._caret_moved.wait()
                await trio.sleep(0.03)  # a burst of keystrokes: one datagram
            self._caret_moved = trio.Event()
            # The group's members are heard too (a replica that joined since).
            members = set(self.node.status().members) if self.node.node is not None else set()
            self.presence.authors = frozenset(self.config.presence_peers) | members
            data = self._presence_datagram()
            for address in self.presence.addresses():
                with contextlib.suppress(OSError):  # lossy by design
                    await self._udp.sendto(data, address)
            if self.presence.expire(trio.current_time()):
                self._send_all(self.presence.message())

    async def _presence_receiver(self) -> None:
        assert self._udp is not None
        while True:
            try:
                data, source = await self._udp.recvfrom(4096)
            except OSError:
                continue  # an ICMP error of an earlier send: lossy by design
            if self.presence.heard(data, trio.current_time(), source[:2]):
                self._send_all(self.presence.message())

    # -- the bot -------------------------------------------------------------------------

    async def _bot(self) -> None:
        await self.node.wait_ready()
        rng = random.Random(self.config.bot_seed)
        for _ in range(self.config.bot):
            await trio.sleep(rng.expovariate(self.config.bot_rate))
            if not self.ready:
                continue  # no edit of a text that is not the group's
            op = random_edit(rng, self.doc.view)
            self.local_edit(op)
            edit = op[0]
            pos = edit.pos + len(edit.text) if isinstance(edit, Insert) else edit.pos
            self._caret = (pos, pos)
            self._caret_moved.set()
        self.bot_done.set()


_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _stop_reason(exc: BaseException | None, pid: int) -> str | None:
    """One line saying why the node stopped, from what its exit raised
    (None: it did not stop by itself)."""
    from epto.transports.trio_node import MemberExcludedError

    from epto import SupersededError

    found: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        elif not isinstance(e, (trio.Cancelled, KeyboardInterrupt, GeneratorExit)):
            found.append(e)

    if exc is not None:
        walk(exc)
    for e in found:
        if isinstance(e, SupersededError):
            return f"replica {pid} superseded: another start of it runs"
        if isinstance(e, MemberExcludedError):
            return f"replica {pid} excluded from the group"
    if found:
        line = str(found[0]).splitlines()[0][:200] if str(found[0]) else ""
        return f"replica {pid} stopped on a fault: {type(found[0]).__name__}: {line}".rstrip(": ")
    return None


def _part_size(node: NodeConfig, replica: ReplicaConfig) -> int:
    """Bytes of one part's edits (``TextDocument(max_part_size=...)``): the
    node's payload limit less the command around them, written with the
    largest numbers it can hold."""
    big = 1 << 64
    around = len(replica.codec.encode("edit", (big, big, big, [], MAX_PARTS, MAX_PARTS))) - 2
    size = node.limits.max_payload_size - around
    if size < MIN_PART_SIZE:
        raise ConfigurationError(
            f"Limits.max_payload_size={node.limits.max_payload_size} leaves {size} bytes for "
            f"an editor operation's part (at least {MIN_PART_SIZE})"
        )
    return size
