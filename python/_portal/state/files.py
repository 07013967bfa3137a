"""Saving open files (plugged into the pickler by the capture).

A file object of the program - a log it appends to, `with open(...)` around the
loop, whose bound __exit__ sits on the value stack - is flushed, and saved as its
path, mode, encoding and position.  On restore it is opened again without
truncating (`w` becomes a plain write-open of the same file) and positioned where
it was, under the same `name`, so writing continues at the right place.  The
process's own sys.stdin/stdout/stderr are the new process's.
"""
import io
import os
import sys

from _portal.checkpoint.refusals import Refuse

_STD = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")


def _std_name(f):
    for name in _STD:
        if getattr(sys, name, None) is f:
            return name
    return None


def _rb_std(name):
    return getattr(sys, name)


def _flags(mode):
    if "+" in mode:
        flags = os.O_RDWR
    elif "r" in mode:
        flags = os.O_RDONLY
    else:
        flags = os.O_WRONLY
    if "a" in mode:
        flags |= os.O_APPEND
    return flags | getattr(os, "O_CLOEXEC", 0)


def _rb_file(path, name, mode, position, kind, text_options, closed):
    fd = os.open(path, _flags(mode))
    # An fd is never truncated or created by open(): "w" and "x" just write.
    reopen = mode.replace("x", "w").replace("t", "")
    if kind == "raw":
        f = io.FileIO(fd, reopen.replace("b", ""), closefd=True)
    elif kind == "buffered":
        f = io.open(fd, reopen if "b" in reopen else reopen + "b", closefd=True)
    else:
        encoding, errors, line_buffering, *newline = text_options   # newline: seat()'s, if any
        f = io.open(fd, reopen, encoding=encoding, errors=errors, closefd=True,
                    newline=newline[0] if newline else None)
        if line_buffering:  # open() has no such argument: set it as the program had it
            f.reconfigure(line_buffering=True)
    _raw(f).name = name  # the name the program opened it with
    if position is not None and "a" not in mode:
        f.seek(position)
    if closed:
        f.close()
    return f


def _raw(f):
    """The FileIO under a text or buffered file."""
    raw = f
    while hasattr(raw, "buffer") or hasattr(raw, "raw"):
        raw = getattr(raw, "buffer", None) or raw.raw
    return raw


def _describe(f):
    name = getattr(_raw(f), "name", None)
    if not isinstance(name, (str, bytes)) or not os.path.isfile(name):
        raise TypeError(f"cannot save {type(f).__name__} {name!r}: not a regular file opened by name")
    return os.path.abspath(name), name


def reduce_file(f):
    std = _std_name(f)
    if std is not None:
        return _rb_std, (std,)
    path, name = _describe(f)
    closed = f.closed
    position = newline = None
    if not closed:
        if f.writable():
            f.flush()
        if f.seekable():
            try:
                position = f.tell()
            except OSError:   # a text file being iterated
                newline = seat(f)
                position = f.tell()
    mode = getattr(f, "mode", "rb")
    text_options = None
    if isinstance(f, io.TextIOWrapper):
        kind = "text"
        text_options = (f.encoding, f.errors, f.line_buffering) + ((newline,) if newline is not None
                                                                    else ())
    elif isinstance(f, io.FileIO):
        kind = "raw"
    else:
        kind = "buffered"
    return _rb_file, (path, name, mode, position, kind, text_options, closed)


# Encodings whose text, encoded again, is the bytes it was decoded from, and in
# which the bytes of '\r' and '\n' stand for nothing else.
_ROUND_TRIP = frozenset({"utf-8", "ascii", "iso8859-1"})
MAX_REST_BYTES = 64 << 20   # what seat() reads to find a file's position
_READ_CHUNK = 1 << 20
_CR, _LF = 0x0D, 0x0A
_DECODER_PENDING = 4   # bytes of a partial character an incremental decoder may hold


def _pread(fd, start, end):
    return b"".join(os.pread(fd, min(_READ_CHUNK, end - at), at) for at in range(start, end, _READ_CHUNK))


def _translated_start(text, raw):
    """Where in `raw` the bytes start that python's newline translation (newline=None:
    '\r\n' and '\r' read as '\n') made into `text`, matched from the end; None if
    they are not."""
    a, b = len(text) - 1, len(raw) - 1
    while a >= 0:
        if b < 0:
            return None
        if text[a] == _LF and raw[b] in (_LF, _CR):
            if raw[b] == _LF and b > 0 and raw[b - 1] == _CR:
                b -= 1
        elif text[a] != raw[b]:
            return None
        a, b = a - 1, b - 1
    return b + 1


def seat(f):
    """Make a text file that iteration stopped from telling tell again, at the same
    place (the module's docstring); "" when it keeps its '\r's (newline=''), else
    None; raises Refuse saying why not.  What can refuse
    is checked before the file is read (a refusal leaves it as it was) but a file
    changed under it while it is being saved."""
    import codecs
    encoding = codecs.lookup(f.encoding).name
    if encoding not in _ROUND_TRIP or f.errors not in ("strict", "surrogateescape") \
            or not f.seekable():
        raise Refuse(f"a {f.encoding} file read line by line (for line in f, csv.reader(f)): "
                      f"its position cannot be found")
    if os.fstat(f.fileno()).st_size - f.buffer.tell() > MAX_REST_BYTES:
        raise Refuse(f"a file read line by line (for line in f, csv.reader(f)) with more than "
                      f"{MAX_REST_BYTES >> 20} MiB left: its position is not looked for")
    # newline='\n', '\r' or '\r\n' (no universal newlines: f.newlines stays None) reads
    # a '\r' as those modes do, which no mode Portal can tell would repeat
    if f.newlines is None and b"\r" in _pread(
            f.fileno(), max(0, f.buffer.tell() - f._CHUNK_SIZE - _DECODER_PENDING),
            os.fstat(f.fileno()).st_size):
        raise Refuse("a file read line by line (for line in f, csv.reader(f)) opened with "
                      "newline='\\n', '\\r' or '\\r\\n', with '\\r' in its lines: its "
                      "position cannot be found (open it with newline='' or none)")
    rest = f.read().encode(encoding, f.errors)
    end = f.buffer.tell()
    position = end - len(rest)
    if position < 0 or _pread(f.fileno(), position, end) != rest:   # not as read: translated?
        low = max(0, position - rest.count(b"\n"))
        start = _translated_start(rest, _pread(f.fileno(), low, end))
        if start is None:
            raise Refuse("a file read line by line changed while it was being saved")
        position = low + start
    f.seek(position)
    # A '\r' the text kept says the file was opened newline='' (the csv module's
    # advice): opened again so (the mode is not readable from the file)
    return "" if position == end - len(rest) and b"\r" in rest else None


REDUCERS = {t: reduce_file for t in (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter,
                                     io.BufferedRandom, io.FileIO)}


def reducers(context):
    return REDUCERS
