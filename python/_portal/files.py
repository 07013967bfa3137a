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
        encoding, errors, line_buffering = text_options
        f = io.open(fd, reopen, encoding=encoding, errors=errors, closefd=True)
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
    position = None
    if not closed:
        if f.writable():
            f.flush()
        if f.seekable():
            position = f.tell()
    mode = getattr(f, "mode", "rb")
    text_options = None
    if isinstance(f, io.TextIOWrapper):
        kind = "text"
        text_options = (f.encoding, f.errors, f.line_buffering)
    elif isinstance(f, io.FileIO):
        kind = "raw"
    else:
        kind = "buffered"
    return _rb_file, (path, name, mode, position, kind, text_options, closed)


REDUCERS = {t: reduce_file for t in (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter,
                                     io.BufferedRandom, io.FileIO)}


def reducers():
    return REDUCERS
