"""The trio side of the drivers: the driver loop's trio shell, the task
lifecycle every trio node shares, the EpTO node body, and the TCP pieces of
the stream node (the transport's configuration and the token ring's,
framing, incoming and outgoing streams). The nodes themselves are the public
modules ``trio_udp``, ``trio_tcp`` (``TcpNode`` and the token ring's
``TokenRingNode``), ``memory`` (the in-process hub) and ``trio_node``
(``open_node``)."""
