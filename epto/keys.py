"""Key files: group keys, Ed25519 signing keys and rosters of public keys.

This module does I/O and draws keys from the operating system's randomness;
the protocol core does neither (it takes keys as arguments).

Files are small JSON documents (docs/security.md). Secret files are created
with mode 0600, written to a temporary file in the same directory, flushed to
disk and then linked into place, so a reader never sees a half-written key;
an existing file is never overwritten unless ``force=True``. Loading a secret
file that others can read fails, as ssh does.

Secret keys are read by one loader, whatever their format (the JSON files of
``epto keygen``, 64 hex digits, or exactly 32 raw bytes), and every format
gets the same permission check. The format is decided by the file's size and
exact content, never by sniffing the first byte: a file of exactly 32 bytes
is a raw key (whatever its bytes), 64 hex digits (surrounding whitespace
allowed) are a hex key, anything else must be a key file of ``epto keygen``.

Every refusal is a :class:`epto.ConfigurationError` naming the file: a file
that cannot be opened, one that is not a regular file (a directory, a FIFO, a
device, a socket: refused without reading it), one too large, malformed, of
another kind, or with a field of the wrong size.
"""

from .wire._keys import generate_group_key as generate_group_key
from .wire._keys import generate_signing_key as generate_signing_key
from .wire._keys import load_group_key as load_group_key
from .wire._keys import load_public_key as load_public_key
from .wire._keys import load_roster as load_roster
from .wire._keys import load_signing_key as load_signing_key
from .wire._keys import roster_from_public_files as roster_from_public_files
from .wire._keys import save_group_key as save_group_key
from .wire._keys import save_roster as save_roster
from .wire._keys import save_signing_key as save_signing_key

__all__ = [
    "generate_group_key",
    "generate_signing_key",
    "load_group_key",
    "load_public_key",
    "load_roster",
    "load_signing_key",
    "roster_from_public_files",
    "save_group_key",
    "save_roster",
    "save_signing_key",
]
