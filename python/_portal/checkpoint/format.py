"""Portal checkpoints on disk: format version 3 (versions 1 and 2 are still read).

Grammar (the same text is in docs/checkpoint-format.md)::

    PARENT/NAME            -> NAME.<G>    symlink, replaced atomically by rename(2)
    PARENT/NAME.<G>/       one complete checkpoint (generation G = 1, 2, ...)
        manifest.json      UTF-8 JSON object, see below
        state.pickle       PRELUDE BODY: two pickle protocol-5 streams sharing one
                           memo (see _portal.checkpoint.reducers); out-of-band buffers are
                           numbered 0, 1, ... in stream order
        blobs/NNNN.bin     pack files holding the out-of-band buffers, each buffer
                           whole inside one file at a 4096-aligned offset, the gaps
                           zero; a new file starts when one would pass 256 MiB;
                           all-zero 4 KiB pages are holes (versions 2, 3)
    PARENT/.NAME.tmp-<pid>-<random>/   a checkpoint being written (never read)

    manifest = {
      "format_version": 3,                 always the FIRST key (2: a build
                                           without _portal._blake3)
      "format": "portal-checkpoint",
      "portal_version": "0.1.0",
      "python": {"version": "3.11.2", "implementation": "cpython",
                 "magic": "a70d0d0a"},     bytecode magic: marshalled code and
                                           resume offsets need the same one
      "created": "2024-05-01T12:00:00.000Z",   UTC
      ...caller fields: "script", "argv", "error" {type, message, traceback, file,
         line}, "loop" {file, line, iteration}, "sources" {filename: sha256}
         (default: every file of the code registry), ...
      "files": {"state.pickle": {"size": N, "sha256": HEX},
                "blobs/0000.bin": {"size": N, "chunk": C, "blake3": HEX}, ...},
                                           every file of the checkpoint but the
                                           manifest itself; sha256: of the whole
                                           file (state.pickle; every file of
                                           version 1, which has no "chunk"); a
                                           pack file of version 3 (2), with
                                           "chunk" C, a power of two in [4096,
                                           256 MiB]: "blake3" ("sha256"), H over
                                           the concatenated H digests of its
                                           C-byte chunks (the last one shorter),
                                           H = BLAKE3 (SHA-256), 32 bytes
      "buffers": [[FILE, OFFSET, SIZE], ...]   out-of-band buffer i is bytes
                                           [OFFSET, OFFSET+SIZE) of FILE
      "total_bytes": N,                    all files, the manifest included
      "hmac": HEX                          always LAST: HMAC-SHA256 with the user's
                                           key (signing.py) of the domain string
                                           "portal-checkpoint-manifest\n" + every
                                           byte of the file before ',\n "hmac": "'
    }

Readers ignore fields they do not know; a new optional field does not change the
version.  Before it unpickles anything a reader refuses: a directory or file that
is not the user's or is writable by group or others, a symbolic link inside, a
manifest without a valid HMAC, another format name or version (by name), and any
file whose size or sha256 differs from the manifest's.  Directories are created
0700 and files 0600, whatever the umask.

Commit protocol (``write_checkpoint``): everything is written into
``PARENT/.NAME.tmp-...``, every file and both directories are fsynced, the
directory is renamed to ``NAME.<G+1>``, the parent fsynced, a new symlink made
beside and renamed over ``NAME`` (the commit point), the parent fsynced again, and
only then the previous generation removed.  A crash at any moment leaves ``NAME``
naming either the previous complete checkpoint or the new complete one; leftovers
(temporary directories of dead writers, unreferenced generations) are removed by
the next write.  One writer per NAME at a time.
"""
import importlib.util
import os
import re
from typing import NamedTuple

from _portal.job_contract import MANIFEST_MAX_BYTES  # contract/job_record.json, generated
from _portal.store import trust as store
from _portal.run.codeindex import CodeChanged

# The package's modules, in the order a checkpoint travels through them:
#   format (this grammar, its constants and errors) -> hashing (digests of pack
#   files) -> manifest (the signed manifest: text, signature, checks) -> workers
#   (the I/O threads) -> write (write_checkpoint) / read (read_checkpoint, and
#   the trusted opening inspect_checkpoint uses too).

FORMAT_NAME = "portal-checkpoint"
FORMAT_VERSION = 3               # written (version 2 by a build without _blake3)
SUPPORTED_VERSIONS = (1, 2, 3)   # 1: pack files hashed whole, no holes; 2: their
                                 # chunks by sha256; 3: their chunks by BLAKE3
try:
    from _portal import __version__ as PORTAL_VERSION   # noqa: N812
except ImportError:
    PORTAL_VERSION = "0.1.0"

MANIFEST = "manifest.json"
STATE = "state.pickle"
BLOBS = "blobs"
ALIGN = 4096
PACK_BYTES = 256 << 20        # start a new pack file past this size
IO_CHUNK = 64 << 20           # bytes per write(2) / hash update
READ_AHEAD = 32 << 20         # a reader asks the kernel to fetch this far past its chunk
RESERVED = ("format_version", "format", "portal_version", "python", "created", "files",
            "buffers", "total_bytes", "hmac")
PYTHON_MAGIC = importlib.util.MAGIC_NUMBER.hex()


class CheckpointError(store.PortalError):
    """A checkpoint cannot be read or committed; the message says why, in lower case."""


class SourceChanged(CheckpointError, CodeChanged):
    """A source file of the saved program is missing or differs from the saved one."""

    def __init__(self, filename, reason=None):
        CodeChanged.__init__(self, filename, reason)

    def __str__(self):
        return "checkpoint: " + CodeChanged.__str__(self)


class CheckpointInfo(NamedTuple):
    path: str            # PARENT/NAME (the symlink)
    total_bytes: int     # all files of the checkpoint, manifest included
    manifest: dict
    seconds: float = 0.0  # the whole write (pickle, pack files, fsyncs, commit)


CHUNK_BYTES = 4 << 20         # digest chunk of a pack file (versions 2 and 3)
MIN_CHUNK_BYTES = ALIGN       # a manifest's "chunk": a power of two in this range
MAX_CHUNK_BYTES = PACK_BYTES


def fail(message):
    raise CheckpointError(message)


# What a reader accepts of a manifest before it believes anything in it.
MAX_MANIFEST_BYTES = MANIFEST_MAX_BYTES   # a manifest is KiBs (sources, argv, traceback)
MAX_MANIFEST_DEPTH = 32           # objects and arrays nested deeper: not a manifest
MAX_MANIFEST_INT_DIGITS = 20      # sizes and offsets fit in 64 bits
MAX_FILE_BYTES = 1 << 50          # a size or offset past this is damage
FILE_NAME_RE = re.compile(r"(?:state\.pickle|blobs/[0-9]{4,6}\.bin)")
HEX_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
JOB_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def generation_name(name, target):
    """Whether the link ``name`` -> ``target`` names a generation beside it."""
    return re.fullmatch(re.escape(name) + r"\.[0-9]{1,9}", target) is not None


def plain_file_name(rel):
    """Whether ``rel`` is a name a checkpoint's files have (no `/` but blobs/'s,
    no `..`, not absolute)."""
    return isinstance(rel, str) and FILE_NAME_RE.fullmatch(rel) is not None


def plain_job_id(name):
    return isinstance(name, str) and JOB_ID_RE.fullmatch(name) is not None


def is_int(value, low=0, high=MAX_FILE_BYTES):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def layout_of(sizes):
    """(pack file sizes {name: size}, buffer table) the writer lays out for
    buffers of ``sizes`` (the same rule as _layout)."""
    files, table = {}, []
    name, end = None, 0
    for n in sizes:
        offset = -(-end // ALIGN) * ALIGN if name is not None else 0
        if name is None or (end > 0 and offset + n > PACK_BYTES):
            name, offset = f"{BLOBS}/{len(files):04d}.bin", 0
        end = offset + n
        files[name] = end
        table.append([name, offset, n])
    return files, table


def chunk_ok(value):
    return is_int(value, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES) and value & (value - 1) == 0


def subdirectories(records):
    return sorted({os.path.dirname(rel) for rel in records} - {""})
