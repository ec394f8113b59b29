"""A page never edits a text that is not the group's, and a restarted author
never takes an operation of its earlier start for its own.

* The server tells its pages when its replica stops being ready (here: a
  hole, ``Replica.resync``), takes no edit from them meanwhile, and gives
  them the text once it is ready again; the page model reports the edit it
  had made as not sent.
* ``TextDocument.number_from``: an operation its earlier start sent and the
  order delivers after the restart is applied as a remote one, and the
  changes the document reports rebuild its view.
"""

from __future__ import annotations

import json
import socket
from contextlib import AsyncExitStack

import pytest
import trio
from epto.services._websocket import connect_page
from epto.services.trio_editor import EditorConfig, EditorServer
from epto.services.trio_rsm import ReplicaConfig, ReplicaNotReadyError
from epto.transports._ports import free_ports

from epto._incarnation import first_seq
from epto.apps._editor import PageModel
from epto.apps._ot import Insert, apply
from epto.apps.text import TextDocument
from epto.endpoint import NodeConfig


@pytest.mark.trio
async def test_a_replica_that_is_not_ready_takes_no_page_edit() -> None:
    async with AsyncExitStack() as stack:
        port = free_ports(1, socket.SOCK_DGRAM)[0]
        node = NodeConfig(pid=1, bind=f"127.0.0.1:{port}", round_interval=0.02, seed=1)
        config = EditorConfig(replica=ReplicaConfig(audit_interval=float("inf")))
        server = await stack.enter_async_context(EditorServer(node, config))
        await server.node.wait_ready()
        ws = await connect_page(server.url)
        stack.push_async_callback(ws.aclose)
        page = PageModel()
        resets: list[str] = []

        async def run() -> None:
            while True:
                message = json.loads(await ws.receive())
                if message["type"] == "reset":
                    resets.append(message["text"])
                reply = page.receive(message)
                if reply is not None:
                    await ws.send(json.dumps(reply))

        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        nursery.start_soon(run)
        with trio.fail_after(10):
            while not (page.ready and page.rev):
                await trio.sleep(0.01)
        await ws.send(json.dumps(page.local((Insert(0, "kept"),))))
        with trio.fail_after(10):
            while not (page.synced and server.doc.text == "kept"):
                await trio.sleep(0.01)

        # A hole: the replica stops applying until it has its state again.
        server.node.replica.resync()
        with trio.fail_after(10):
            while page.ready:
                await trio.sleep(0.01)
        with pytest.raises(ReplicaNotReadyError):
            server.local_edit((Insert(0, "bot"),))
        await ws.send(json.dumps(page.local((Insert(4, " lost"),))))
        with trio.fail_after(10):
            while server.edits_refused < 1:
                await trio.sleep(0.01)
        assert server.doc.view == "kept"

        # Its state again (here its own): the page gets the text, whole, and
        # reports what it had typed as not sent.
        replica = server.node.replica
        replica.restore(replica.snapshot())
        with trio.fail_after(10):
            while not (page.ready and len(resets) == 2):
                await trio.sleep(0.01)
        assert resets == ["", "kept"] and page.text == "kept"
        assert page.not_sent == ["kept lost"]
        await ws.send(json.dumps(page.local((Insert(4, "!"),))))
        with trio.fail_after(10):
            while not (page.synced and server.doc.text == "kept!"):
                await trio.sleep(0.01)


def test_an_operation_of_an_earlier_start_is_not_taken_for_the_new_ones() -> None:
    before = TextDocument(author=1)
    before.local_edit((Insert(0, "old"),))
    (old,) = before.take_outgoing()  # sent, then the process died

    for numbered in (True, False):
        doc = TextDocument(author=1)  # started again (nothing applied yet)
        if numbered:
            doc.number_from(first_seq(7))
        doc.local_edit((Insert(0, "new"),))
        (new,) = doc.take_outgoing()
        doc.take_changes()  # the pages have the local edit
        view = doc.view
        for command in (old, new):  # the order: the old operation first
            doc.edit(*command)
            for change in doc.take_changes():
                view = apply(view, change.op)
        if numbered:
            assert new[1] == first_seq(7) + 1
            # The changes the pages get rebuild the document's view.
            assert doc.text == doc.view == view == "oldnew"
        else:
            # Numbered from 0 again, the old operation (same author, seq and
            # ref) was taken for the new one: the view lost track.
            assert view != doc.view
    with pytest.raises(ValueError):
        doc.number_from(0)
