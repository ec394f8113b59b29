"""One replica of the fault suite, in a process of its own (``epto bench faults``).

::

    python -m epto.benchmarks._fault_worker '{"engine": "token-ring", "pid": 1, ...}'

It runs one :class:`~epto.services.trio_rsm.ReplicatedNode` of a
:mod:`~epto.benchmarks._fault_machines` machine and serves a client API on a
loopback TCP port: newline-delimited JSON, one request per line (at most
:data:`MAX_LINE` bytes; a longer line closes the connection), one answer per
request, in order::

    {"op": "write", "key": "k1", "value": 7}          -> {"ok": true, "result": null}
    {"op": "read", "key": "k1"}                       -> {"ok": true, "result": 7}
    {"op": "cas", "key": "k1", "expected": 7, "new": 8} -> {"ok": true, "result": true}
    {"op": "add", "element": 3}    {"op": "read"}     (the set)
    {"op": "status"}  -> the ReplicaStatus fields
    {"op": "state"}   -> {"state": ..., "cut": ..., "digest": ..., "applied": ..., "ready": ...}

Every command, reads too, is ``await replica.call(...)``: it goes through the
order. A failed command answers ``{"ok": false, "error": "...", "definite":
bool}``: ``definite`` only when the replica refused it before broadcasting
(not ready, unknown command); a timeout or any other error is indeterminate.
It stops when its standard input ends (the harness holds the other end).
Once listening it prints one line ``ready {"api": port, "gossip": port,
"transfer": port}`` (the ports it bound; the harness's proxies forward there).

The specification (the JSON argument): ``engine`` (``"token-ring"`` or
``"epto"``), ``pid``, ``members`` (pid to address; proxies), ``advertise``
(token ring: the address announced to the others), ``contacts`` (a
token-ring newcomer), ``peers`` (pid to transfer address), ``data_dir``
(None: in memory), ``joining``, ``workload`` (``"register"`` or ``"set"``),
``seed``, ``round_interval`` (EpTO), ``group_size`` (EpTO), ``call_timeout``,
``snapshot_every``, ``transfer_timeout``. Everything else is the library's
default (``joining`` too, unless the specification says true).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from typing import Any, Final

import attrs
import trio

from epto import ConfigurationError
from epto.endpoint import NodeConfig

from ._fault_machines import GrowSet, RegisterStore, make_machine

MAX_LINE: Final = 65536
"""Longest request line, bytes."""


def _node_config(spec: dict[str, Any]) -> NodeConfig:
    fields: dict[str, Any] = {
        "pid": int(spec["pid"]),
        "bind": "127.0.0.1:0",
        "seed": int(spec.get("seed", 0)) or None,
    }
    members = {int(p): a for p, a in spec.get("members", {}).items()}
    contacts = {int(p): a for p, a in spec.get("contacts", {}).items()}
    if spec["engine"] == "token-ring":
        fields.update(mode="token-ring", advertise=spec.get("advertise"))
        if contacts:
            fields["contacts"] = contacts
        else:
            fields["members"] = members
    else:
        fields.update(
            mode="epto",
            members=members,
            round_interval=float(spec.get("round_interval", 0.05)),
        )
        if spec.get("group_size"):
            fields["group_size"] = int(spec["group_size"])
    # The member's incarnation and lock: ReplicatedNode keeps them in the
    # replica's data directory by itself.
    return NodeConfig(**fields)


def _replica_config(spec: dict[str, Any]) -> Any:
    from epto.services.trio_rsm import ReplicaConfig

    fields: dict[str, Any] = {
        "data_dir": spec.get("data_dir"),
        "peers": {int(p): a for p, a in spec.get("peers", {}).items()},
        "snapshot_every": int(spec.get("snapshot_every", 200)),
        "transfer_timeout": float(spec.get("transfer_timeout", 10.0)),
    }
    if spec.get("joining"):
        # A newcomer or a wiped replica: fetch the state. Otherwise the
        # library's default finds out whether the local state is the group's.
        fields["joining"] = True
    return ReplicaConfig(**fields)


def _definite(exc: BaseException) -> bool:
    """Whether ``exc`` says for certain that the command was not broadcast."""
    if isinstance(exc, ConfigurationError):
        return True
    name = type(exc).__name__.lower()
    return "notready" in name or "not_ready" in name


def _command(machine: Any, request: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    op = request.get("op")
    if isinstance(machine, RegisterStore):
        key = request.get("key")
        if not isinstance(key, str):
            raise ValueError("a register operation needs a string 'key'")
        if op == "write":
            return "write", (key, request.get("value"))
        if op == "read":
            return "read", (key,)
        if op == "cas":
            return "cas", (key, request.get("expected"), request.get("new"))
    elif isinstance(machine, GrowSet):
        if op == "add":
            return "add", (request.get("element"),)
        if op == "read":
            return "read", ()
    raise ValueError(f"unknown operation {op!r}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


class _Api:
    def __init__(self, replica: Any, call_timeout: float) -> None:
        self.replica = replica
        self.call_timeout = call_timeout
        self.counts: dict[str, int] = {}

    async def answer(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            return {"ok": False, "error": "a request is a JSON object", "definite": True}
        op = request.get("op")
        replica = self.replica
        if op == "status":
            status = attrs.asdict(replica.status())
            return {"ok": True, "result": {k: _jsonable(v) for k, v in status.items()}}
        if op == "state":
            inner = replica.replica
            return {
                "ok": True,
                "result": {
                    "state": replica.machine.state(),
                    "cut": _jsonable(inner.cut),
                    "digest": inner.digest.hex(),
                    "applied": inner.applied,
                    "ready": inner.ready,
                },
            }
        try:
            name, args = _command(replica.machine, request)
        except ValueError as exc:
            return {"ok": False, "error": str(exc), "definite": True}
        try:
            with trio.fail_after(self.call_timeout):
                result = await replica.call(name, *args)
        except trio.TooSlowError:
            return {"ok": False, "error": "timeout", "definite": False}
        except Exception as exc:
            definite = _definite(exc)
            error = f"{type(exc).__name__}: {exc}"[:300]
            if not definite:
                print(f"call {name}{args!r}: {error}", file=sys.stderr, flush=True)
            return {"ok": False, "error": error, "definite": definite}
        return {"ok": True, "result": result}

    async def serve(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        try:
            while True:
                newline = buffer.find(b"\n")
                if newline < 0:
                    if len(buffer) > MAX_LINE:
                        return
                    chunk = await stream.receive_some(MAX_LINE)
                    if not chunk:
                        return
                    buffer += chunk
                    continue
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                try:
                    request = json.loads(line)
                except ValueError:
                    answer: dict[str, Any] = {
                        "ok": False,
                        "error": "not JSON",
                        "definite": True,
                    }
                else:
                    answer = await self.answer(request)
                await stream.send_all(json.dumps(answer).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return


async def serve(spec: dict[str, Any]) -> None:
    from epto.services.trio_rsm import ReplicatedNode

    machine = make_machine(str(spec.get("workload", "register")))
    node = _node_config(spec)
    async with ReplicatedNode(machine, node, _replica_config(spec)) as replica:
        api = _Api(replica, float(spec.get("call_timeout", 5.0)))
        async with trio.open_nursery() as nursery:
            serve_api = functools.partial(trio.serve_tcp, api.serve, 0, host="127.0.0.1")
            listeners = await nursery.start(serve_api)
            port = listeners[0].socket.getsockname()[1]
            gossip = int(str(replica.node.address).rpartition(":")[2])
            transfer = int(replica.transfer_address.rpartition(":")[2])
            ports = {"api": port, "gossip": gossip, "transfer": transfer}
            print("ready " + json.dumps(ports), flush=True)
            nursery.start_soon(_stop_with_parent, nursery.cancel_scope)


async def _stop_with_parent(scope: trio.CancelScope) -> None:
    """Stop when standard input ends: the harness keeps it open while it runs,
    so a worker never outlives it."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    try:
        while await stdin.receive_some(4096):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await stdin.aclose()
    print("standard input closed: stopping", file=sys.stderr, flush=True)
    scope.cancel()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(args[0])
    try:
        trio.run(serve, spec)
    except KeyboardInterrupt:
        return 130
    except BaseException:
        traceback.print_exc()
        print("worker stopped by an error", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
