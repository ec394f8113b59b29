"""The implementation of :mod:`epto.keys`; see there."""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError
from .._event import ProcessId
from ._seal import CIPHERS, Cipher, GroupKey

GROUP_KEY_TYPE = "epto-group-key"
SIGNING_KEY_TYPE = "epto-signing-key"
PUBLIC_KEY_TYPE = "epto-public-key"
ROSTER_TYPE = "epto-roster"


def generate_group_key(key_id: int = 1, cipher: Cipher = "aes-256-gcm") -> GroupKey:
    """A new random group key."""
    return GroupKey(key_id=key_id, secret=secrets.token_bytes(32), cipher=cipher)


def generate_signing_key() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as raw bytes ``(private, public)``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    return key.private_bytes_raw(), key.public_key().public_bytes_raw()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, size: int, what: str) -> bytes:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except ValueError:
        raise ConfigurationError(f"{what} is not base64") from None
    if len(raw) != size:
        raise ConfigurationError(f"{what} must be {size} bytes, not {len(raw)}")
    return raw


def write_file_atomically(
    path: str | os.PathLike[str], data: bytes, *, mode: int, force: bool
) -> None:
    """Create ``path`` with ``data`` and permission ``mode``, atomically.

    Raises ``FileExistsError`` if ``path`` exists and ``force`` is false.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have removed bits we asked for
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if force:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails if target exists: no overwrite, no race
            os.unlink(tmp)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _dump(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


RAW_KEY_SIZE = 32
"""Bytes of a raw key file (a group secret or an Ed25519 private key)."""
_MAX_KEY_FILE = 1 << 20


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(p: Path, mode: int) -> ConfigurationError | None:
    """The refusal of a key file that is not a regular file, or None."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return ConfigurationError(f"{p} is {kind}, not a key file")


def _read(path: str | os.PathLike[str], *, secret: bool) -> bytes:
    """The bytes of a key file, the one reader of every key file.

    Anything but a regular file (a directory, a FIFO, a device such as
    /dev/zero, a socket) is refused before it is opened, and again on the
    opened file (opened without blocking, so a FIFO swapped in between cannot
    hang the caller), without reading a byte. A secret file that group or
    others can access is refused (checked on the opened file, so it cannot
    change in between). A file that cannot be opened is refused with the
    system's reason. Every refusal is a :class:`ConfigurationError` naming the
    file.
    """
    p = Path(path)
    try:
        refusal = _not_regular(p, os.stat(p).st_mode)
        if refusal is not None:
            raise refusal
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigurationError(f"{p}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        refusal = _not_regular(p, mode)
        if refusal is not None:
            raise refusal
        if secret and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError(
                f"{p} is accessible by other users (mode {stat.filemode(mode)}); chmod 600 it"
            )
        data = bytearray()
        while len(data) <= _MAX_KEY_FILE:
            part = os.read(fd, _MAX_KEY_FILE + 1 - len(data))
            if not part:
                break
            data += part
    except OSError as exc:
        raise ConfigurationError(f"{p}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE:
        raise ConfigurationError(f"{p} is too large for a key file")
    return bytes(data)


def _parse(p: Path, data: bytes, expected: str) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # deep nesting: RecursionError
        raise ConfigurationError(f"{p} is not a key file: {exc}") from None
    if not isinstance(doc, dict) or doc.get("type") != expected:
        raise ConfigurationError(f"{p} is not an {expected} file")
    return doc


def _load(path: str | os.PathLike[str], expected: str, *, secret: bool) -> dict[str, Any]:
    return _parse(Path(path), _read(path, secret=secret), expected)


def read_secret(path: str | os.PathLike[str], expected: str) -> bytes | dict[str, Any]:
    """The one loader of secret key files, after the permission check: the 32
    key bytes of a raw (exactly 32 bytes) or hex (64 hex digits) file, or the
    document of a JSON key file of type ``expected``."""
    p = Path(path)
    data = _read(p, secret=True)
    if len(data) == RAW_KEY_SIZE:
        return data
    text = data.strip()
    if len(text) == 2 * RAW_KEY_SIZE:
        try:
            return bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            pass
    if not text.startswith(b"{"):
        raise ConfigurationError(
            f"{p} is neither a key file of epto keygen, 64 hex digits nor {RAW_KEY_SIZE} raw bytes"
        )
    return _parse(p, data, expected)


def save_group_key(path: str | os.PathLike[str], key: GroupKey, *, force: bool = False) -> None:
    doc = {"type": GROUP_KEY_TYPE, "key_id": key.key_id, "cipher": key.cipher}
    doc["secret"] = _b64(key.secret)
    write_file_atomically(path, _dump(doc), mode=0o600, force=force)


def load_group_key(path: str | os.PathLike[str]) -> GroupKey:
    """A group key from a file of ``epto keygen group``, or a 32-byte secret
    (raw or hex, key id 1, AES-256-GCM); see :func:`read_secret`."""
    doc = read_secret(path, GROUP_KEY_TYPE)
    if isinstance(doc, bytes):
        return GroupKey(key_id=1, secret=doc)
    cipher = doc.get("cipher")
    if cipher not in CIPHERS:
        raise ConfigurationError(f"{path}: unknown cipher {cipher!r}")
    key_id = doc.get("key_id")
    if not isinstance(key_id, int) or isinstance(key_id, bool):
        raise ConfigurationError(f"{path}: key_id must be an integer")
    secret = _unb64(doc.get("secret"), 32, f"{path}: secret")
    try:
        return GroupKey(key_id=key_id, secret=secret, cipher=cipher)
    except ConfigurationError as exc:  # a key id out of range
        raise ConfigurationError(f"{path}: {exc}") from None


def save_signing_key(
    path: str | os.PathLike[str],
    private: bytes,
    public: bytes,
    *,
    pid: ProcessId | None = None,
    force: bool = False,
) -> Path:
    """Write the private key to ``path`` (0600) and the public key to
    ``path + ".pub"`` (0644); returns the public file's path."""
    pub_path = Path(f"{os.fspath(path)}.pub")
    if not force and pub_path.exists():
        raise FileExistsError(17, "File exists", os.fspath(path), None, os.fspath(pub_path))
    pub_doc: dict[str, Any] = {"type": PUBLIC_KEY_TYPE, "public": _b64(public)}
    if pid is not None:
        pub_doc["pid"] = pid
    priv_doc = dict(pub_doc, type=SIGNING_KEY_TYPE, private=_b64(private))
    write_file_atomically(path, _dump(priv_doc), mode=0o600, force=force)
    write_file_atomically(pub_path, _dump(pub_doc), mode=0o644, force=force)
    return pub_path


def load_signing_key(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """``(private, public)`` raw bytes from a file of ``epto keygen signing``,
    or from a 32-byte Ed25519 private key (raw or hex; see :func:`read_secret`).
    A file whose public key is not the private key's is refused."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    doc = read_secret(path, SIGNING_KEY_TYPE)
    if isinstance(doc, bytes):
        public = Ed25519PrivateKey.from_private_bytes(doc).public_key().public_bytes_raw()
        return doc, public
    private = _unb64(doc.get("private"), 32, f"{path}: private")
    public = _unb64(doc.get("public"), 32, f"{path}: public")
    derived = Ed25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()
    if public != derived:
        raise ConfigurationError(f"{path}: public is not the public key of private")
    return private, public


def load_public_key(path: str | os.PathLike[str]) -> tuple[ProcessId | None, bytes]:
    doc = _load(path, PUBLIC_KEY_TYPE, secret=False)
    pid = doc.get("pid")
    if pid is not None and not isinstance(pid, int):
        raise ConfigurationError(f"{path}: pid must be an integer")
    return pid, _unb64(doc.get("public"), 32, f"{path}: public")


def save_roster(
    path: str | os.PathLike[str], roster: Mapping[ProcessId, bytes], *, force: bool = False
) -> None:
    members = {str(pid): _b64(key) for pid, key in sorted(roster.items())}
    doc = {"type": ROSTER_TYPE, "members": members}
    write_file_atomically(path, _dump(doc), mode=0o644, force=force)


def load_roster(path: str | os.PathLike[str]) -> dict[ProcessId, bytes]:
    """Process id to raw public key, for ``SignatureVerifier``."""
    doc = _load(path, ROSTER_TYPE, secret=False)
    members = doc.get("members")
    if not isinstance(members, dict):
        raise ConfigurationError(f"{path}: members must be an object")
    roster: dict[ProcessId, bytes] = {}
    for pid, key in members.items():
        if not (pid.isascii() and pid.isdigit()):
            raise ConfigurationError(f"{path}: member id {pid!r} is not an integer")
        roster[int(pid)] = _unb64(key, 32, f"{path}: key of {pid}")
    return roster


def roster_from_public_files(paths: Iterable[str | os.PathLike[str]]) -> dict[ProcessId, bytes]:
    roster: dict[ProcessId, bytes] = {}
    for path in paths:
        pid, public = load_public_key(path)
        if pid is None:
            raise ConfigurationError(f"{path} names no pid; generate it with --pid")
        if pid in roster:
            raise ConfigurationError(f"pid {pid} appears twice")
        roster[pid] = public
    return roster
