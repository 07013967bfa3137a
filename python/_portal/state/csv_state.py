"""csv writers and readers of the program (a plug-in, see plugins.py).

`csv.writer(f)` keeps only `f.write` and its dialect; `csv.reader(f)` keeps its
input iterator, its dialect and `line_num`.  Neither can be pickled, and neither
tells what it holds but through the garbage collector's view of its references.

| object | saved as | restored as |
|---|---|---|
| `csv.writer(f, ...)` | `f.write` (the file itself is saved by files.py: flushed, re-opened at its position) + the dialect's attributes | `csv.writer` on the same `write`, same dialect: the rows that follow land after those already written |
| `csv.reader(f, ...)` | its input iterator (the file: at its position) + dialect + `line_num` | `csv.reader` over the same input, `line_num` as it was |
| `csv.DictWriter`, `csv.DictReader` | plain Python objects holding the above | the same |

Nothing is buffered inside a writer (each row is handed to `write` at once) or
inside a reader between rows, so nothing else is lost.

A reader over a text file being iterated (`csv.reader(open(path, newline=""))`)
saves the file as files.py does any file, at its position, which it finds
though iteration stopped the file from telling it (files.seat).
"""
import sys

from _portal.checkpoint.refusals import Refuse

_DIALECT_FIELDS = ("delimiter", "quotechar", "escapechar", "doublequote", "skipinitialspace",
                   "lineterminator", "quoting", "strict")


class _Dialect:
    """The attributes csv.writer/csv.reader read from a dialect object."""

    def __init__(self, fields):
        for name, value in fields.items():
            setattr(self, name, value)


class _WriteTo:
    """What csv.writer takes `write` from: the saved callable."""
    __slots__ = ("write",)

    def __init__(self, write):
        self.write = write


class _Resumed:
    """A reader's input after a restore: `skip` blank lines first (each one a row
    the reader counts, to set its line_num back), then the saved input."""

    def __init__(self, source, skip):
        self.source, self.skip = source, skip

    def __iter__(self):
        return self

    def __next__(self):
        if self.skip:
            self.skip -= 1
            return "\n"
        return next(self.source)


def _dialect_fields(dialect):
    return {name: getattr(dialect, name) for name in _DIALECT_FIELDS}


def _rb_writer(write, fields):
    import csv
    return csv.writer(_WriteTo(write), dialect=_Dialect(fields))


def _rb_reader(source, fields, line_num):
    import csv
    reader = csv.reader(_Resumed(source, line_num), dialect=_Dialect(fields))
    for _ in range(line_num):
        next(reader)
    return reader


def _referents(obj):
    import gc
    return [r for r in gc.get_referents(obj) if not isinstance(r, type)]


def _reduce_writer(writer):
    dialect = writer.dialect
    found = [r for r in _referents(writer) if r is not dialect and callable(r)]
    if len(found) != 1:
        raise Refuse("a csv writer whose output cannot be found")
    return (_rb_writer, (found[0], _dialect_fields(dialect)))


def _reduce_reader(reader):
    dialect = reader.dialect
    found = [r for r in _referents(reader) if r is not dialect and not isinstance(r, list)]
    if len(found) != 1:
        raise Refuse("a csv reader whose input cannot be found")
    source = found[0]
    if type(source) is _Resumed and not source.skip:
        source = source.source
    return (_rb_reader, (source, _dialect_fields(dialect), reader.line_num))


def reducers(context):
    csv = sys.modules.get("_csv")
    if csv is None:
        return {}
    import io
    probe = io.StringIO()
    return {type(csv.writer(probe)): _reduce_writer, type(csv.reader(probe)): _reduce_reader}
