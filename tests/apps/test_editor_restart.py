"""``epto editor --data-dir`` restarted as itself, over real processes on
loopback: three replicas, one WebSocket page each (``PageModel``, what the
browser page does); edits before, while one replica is SIGKILLed and while
it starts again (same id, ports and data directory), and after. Every
replica converges to the same text, which holds every edit; the restarted
replica's page reconnects by itself, its first text holds everything the
replica had and everything the group had when it started again, and it
edits again."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from epto.services._websocket import WebSocket, WebSocketClosed, connect_page
from epto.transports._ports import free_ports

from epto.apps._editor import PageModel
from epto.apps._ot import Insert

PIDS = (1, 2, 3)
VICTIM = 3


class Replica:
    """One ``epto editor`` process, started (again) with the same arguments."""

    def __init__(self, pid: int, argv: list[str], tmp: Path) -> None:
        self.pid = pid
        self.argv = argv
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.url = ""

    @property
    def log(self) -> Path:
        return self.tmp / f"editor-{self.pid}-{self.starts}.err"

    def start(self) -> None:
        self.starts += 1
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=err)

    async def wait_started(self, timeout: float = 30) -> None:
        with trio.fail_after(timeout):
            while True:
                for line in self.log.read_text(errors="replace").splitlines():
                    if line.startswith(f"ready {self.pid} "):
                        self.url = line.split()[2]
                        return
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise AssertionError(f"editor {self.pid} exited: {self.stderr()}")
                await trio.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


class Page:
    """A page of one replica: reconnects when the server goes away, as the
    browser page does, and keeps its ``PageModel`` across connections."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.model = PageModel()
        self.ws: WebSocket | None = None
        self.connected = trio.Event()
        self.connections = 0
        self.resets: list[tuple[int, str]] = []
        """(connection, text) of every reset received."""

    async def run(self) -> None:
        backoff = 0.05
        while True:
            try:
                ws = await connect_page(self.replica.url)
            except (OSError, WebSocketClosed):
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
                continue
            backoff = 0.05
            self.ws, self.connections = ws, self.connections + 1
            self.model.ready = False
            self.connected.set()
            try:
                while True:
                    message = json.loads(await ws.receive())
                    if message.get("type") == "reset":
                        self.resets.append((self.connections, message["text"]))
                    reply = self.model.receive(message)
                    if reply is not None:
                        await ws.send(json.dumps(reply))
            except (WebSocketClosed, OSError, trio.BrokenResourceError):
                pass
            finally:
                self.ws, self.connected = None, trio.Event()
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await ws.aclose()

    @property
    def editable(self) -> bool:
        return self.ws is not None and self.model.ready and self.model.rev > 0

    async def type(self, word: str, rng: random.Random) -> None:
        """Insert ``word`` at a random place, once the page is editable."""
        with trio.fail_after(30):
            while not self.editable:
                await trio.sleep(0.02)
        assert self.ws is not None
        # Between two words: concurrent inserts never split one another.
        text = self.model.text
        places = [0] + [i + 1 for i, c in enumerate(text) if c == ">"]
        op = (Insert(rng.choice(places), word),)
        message = self.model.local(op)
        if message is not None:
            await self.ws.send(json.dumps(message))

    @property
    def settled(self) -> bool:
        """Connected, its edits acknowledged and in the group's order."""
        return self.editable and self.model.synced and not self.model.unsaved


async def settled(pages: list[Page], timeout: float, what: str) -> str:
    """The one text the pages show once every one of them is settled."""
    deadline = trio.current_time() + timeout
    while trio.current_time() < deadline:
        texts = {p.model.text for p in pages}
        if all(p.settled for p in pages) and len(texts) == 1:
            return texts.pop()
        await trio.sleep(0.05)
    detail = [(p.replica.pid, p.settled, p.model.ready, p.model.text) for p in pages]
    raise AssertionError(f"{what}: no common text within {timeout} s: {detail}")


def _argv(mode: str, pid: int, ports: dict[str, list[int]], tmp: Path) -> list[str]:
    i = PIDS.index(pid)
    argv = [sys.executable, "-m", "epto.cli", "editor", f"--id={pid}", f"--mode={mode}"]
    argv += [f"--bind=127.0.0.1:{ports['node'][i]}", f"--http=127.0.0.1:{ports['http'][i]}"]
    argv += [f"--transfer=127.0.0.1:{ports['transfer'][i]}"]
    argv += [f"--presence=127.0.0.1:{ports['presence'][i]}"]
    for j, other in enumerate(PIDS):
        if other != pid:
            argv += [f"--peer={other}=127.0.0.1:{ports['node'][j]}"]
            argv += [f"--peer-transfer={other}=127.0.0.1:{ports['transfer'][j]}"]
            argv += [f"--peer-presence={other}=127.0.0.1:{ports['presence'][j]}"]
    argv += [f"--data-dir={tmp / f'data-{pid}'}", f"--seed={pid}"]
    argv += ["--round-interval=0.02", "--audit-interval=0.3"]
    return argv


@pytest.mark.trio
@pytest.mark.parametrize("mode", ["epto", "token-ring"])
async def test_a_replica_restarted_with_its_data_dir_rejoins_with_its_text(
    mode: str, tmp_path: Path
) -> None:
    node_kind = socket.SOCK_STREAM if mode == "token-ring" else socket.SOCK_DGRAM
    tcp = free_ports(6, socket.SOCK_STREAM)
    ports = {
        "node": free_ports(3, node_kind),
        "http": tcp[:3],
        "transfer": tcp[3:],
        "presence": free_ports(3, socket.SOCK_DGRAM),
    }
    replicas = {pid: Replica(pid, _argv(mode, pid, ports, tmp_path), tmp_path) for pid in PIDS}
    rng = random.Random(7)
    typed: list[str] = []

    async def burst(pages: list[Page], tag: str, n: int) -> None:
        for k in range(n):
            page = pages[k % len(pages)]
            word = f"<{tag}{k}p{page.replica.pid}>"
            typed.append(word)
            await page.type(word, rng)
            await trio.sleep(0.01)

    try:
        for replica in replicas.values():
            replica.start()
        for replica in replicas.values():
            await replica.wait_started()
        pages = {pid: Page(replicas[pid]) for pid in PIDS}
        async with trio.open_nursery() as nursery:
            for page in pages.values():
                nursery.start_soon(page.run)
            every = list(pages.values())
            others = [pages[p] for p in PIDS if p != VICTIM]
            victim = pages[VICTIM]

            # Before: every page types; all settle on one text.
            await burst(every, "b", 9)
            before = await settled(every, 30, "before the kill")

            # The victim is killed; the others keep typing, and go on while
            # it starts again with the same id, ports and data directory.
            replicas[VICTIM].kill()
            await burst(others, "d", 4)
            down = await settled(others, 30, "while one is down")
            replicas[VICTIM].start()
            spawned = trio.current_time()
            await burst(others, "r", 4)
            await replicas[VICTIM].wait_started()

            # Its page reconnects and gets the group's text, which holds
            # everything it had.
            with trio.fail_after(30):
                while not (victim.connections == 2 and victim.editable):
                    await trio.sleep(0.02)
            back = trio.current_time() - spawned
            # After: every page types again, the restarted one too.
            await burst(every, "a", 9)
            after = await settled(every, 30, "after the restart")
            print(f"{mode}: restarted replica's page editable {back:.2f} s after the spawn")
            nursery.cancel_scope.cancel()
    finally:
        for replica in replicas.values():
            replica.stop()

    for word in typed:
        assert word in after, (word, after)
    assert len(after) == sum(map(len, typed))
    # The restarted replica's first text for its page holds all it had, and
    # all the group had when it started again: it is ready only then.
    first = next(text for connection, text in victim.resets if connection == 2)
    assert all(w in first for w in before.replace(">", "> ").split()), (before, first)
    assert all(w in first for w in down.replace(">", "> ").split()), (down, first)
    # The page that was connected at the kill had nothing unconfirmed, so
    # nothing was reported as not sent.
    assert victim.model.not_sent == []
    # The restarted replica kept its text on disk (the log and its identity).
    data = tmp_path / f"data-{VICTIM}"
    assert (data / "log" / str(VICTIM)).is_dir()
