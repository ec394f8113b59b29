"""A member's identity on disk: its last incarnation and the lock that keeps a
second live process from running it (docs/node.md, *Restart*).

Rules:

* In ``data_dir``, ``member-<pid>.json`` holds the member's last incarnation
  and ``member-<pid>.lock`` is locked (``flock``, exclusive, not blocking)
  for as long as the process runs it. The lock goes with the process: a
  SIGKILLed process leaves no stale lock behind.
* A start takes the lock first, then the incarnation one above the stored
  one (and at least the wall clock's, :func:`epto._incarnation.next_incarnation`),
  and writes it durably (temporary file, ``fsync``, rename) before the node
  sends anything: a crash right after cannot give the next start the same
  number.
* A lock held by another process: :class:`epto.MemberRunningError`, before
  any socket is opened. Several members may share one directory (the
  delivery log's root of ``epto node``): the files are named by id.
* Without ``data_dir`` nothing is written and nothing is locked: the
  incarnation comes from the wall clock (seconds), so a member restarted
  without its directory still starts above every start of more than a
  second before; two live processes with one id are then told apart only by
  the group (the older one stops when the newer one's events reach it,
  :class:`epto.SupersededError`).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from epto import ConfigurationError, MemberRunningError, ProcessId
from epto._incarnation import MAX_INCARNATION, next_incarnation

__all__ = ["MemberClaim", "claim_member"]


class MemberClaim:
    """The lock on a member's files, held until :meth:`release`."""

    def __init__(
        self,
        incarnation: int,
        fd: int | None,
        previous: int | None = None,
        *,
        pid: ProcessId = 0,
        data_dir: str | None = None,
    ) -> None:
        self.incarnation = incarnation
        self.pid = pid
        self.data_dir = data_dir
        """The member's directory (None: nothing is kept), where the node
        also keeps the member's vote (``transports/_ring_durable.py``)."""
        self.previous = previous
        """The incarnation of the last start found in the data directory: an
        int means this start is a restart of the member (it ran before, and
        must come back into its group rather than found one); None means no
        earlier start is known (a first start, or no data directory)."""
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock


def claim_member(
    pid: ProcessId,
    *,
    data_dir: str | None,
    incarnation: int | None = None,
    wall: float | None = None,
) -> MemberClaim:
    """Claim member ``pid``'s files in ``data_dir`` and fix this start's
    incarnation (``incarnation``, or drawn when None); release the claim when
    the node stops (see the module's rules)."""
    now = time.time() if wall is None else wall
    if data_dir is None:
        drawn = incarnation if incarnation is not None else next_incarnation(None, now)
        return MemberClaim(drawn, None, pid=pid)
    root = Path(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    fd = _lock(root / f"member-{pid}.lock", pid)
    try:
        record = root / f"member-{pid}.json"
        stored = _stored_incarnation(record, pid)
        if incarnation is not None:
            if stored is not None and incarnation <= stored:
                raise ConfigurationError(
                    f"NodeConfig.incarnation={incarnation} is not above the last "
                    f"start's ({stored}, in {record})"
                )
            chosen = incarnation
        else:
            chosen = next_incarnation(stored, now)
            if stored is not None and chosen <= stored:
                raise ConfigurationError(f"member {pid}: incarnations exhausted in {record}")
        _write_atomically(record, {"pid": pid, "incarnation": chosen})
    except BaseException:
        os.close(fd)
        raise
    return MemberClaim(chosen, fd, stored, pid=pid, data_dir=str(root))


def _lock(path: Path, pid: ProcessId) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise MemberRunningError(
            f"member {pid} already runs in another process (the lock {path} is held); "
            "stop it first, or start this one with another id"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _stored_incarnation(record: Path, pid: ProcessId) -> int | None:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"member {pid}: unreadable identity file {record}: {exc}"
        ) from None
    if not isinstance(data, dict) or data.get("pid") != pid:
        raise ConfigurationError(f"{record} belongs to another member than {pid}")
    incarnation = data.get("incarnation")
    if not isinstance(incarnation, int) or not 0 <= incarnation <= MAX_INCARNATION:
        raise ConfigurationError(f"member {pid}: bad incarnation in {record}")
    return incarnation


def _write_atomically(path: Path, data: dict[str, int]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
