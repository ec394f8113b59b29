"""Application services built on the drivers (imported as ``epto.services``).

A service runs an application layer of the core (:mod:`epto.rsm`,
:mod:`epto.apps`) on a node of :mod:`epto.transports` and speaks to its own
clients besides the group:

* :class:`epto.services.trio_rsm.ReplicatedNode`: a replicated state machine
  on a trio node, either engine, with durability and state transfer
  (docs/rsm.md);
* :class:`epto.services.zmq_rsm.ZmqReplica`: the same on the ZeroMQ
  node, synchronous;
* :class:`epto.services.trio_editor.EditorServer`: the replicated text
  editor's server, its browser pages over HTTP and WebSocket (docs/editor.md).

The layering is one-way: the core imports neither the drivers nor the
services, the drivers never import the services (``tests/test_layout.py``).
The modules live in their own files so that importing this package needs
neither trio nor pyzmq.
"""
