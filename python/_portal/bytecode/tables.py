"""The one door to the per-version bytecode tables.

`T` is the table module of the running CPython (v311.py, v312.py, v313.py, v314.py), chosen by
sys.version_info; a version no table was checked for is refused here, in one
line, before anything reads bytecode it does not know.
"""
import sys

# The versions whose tables exist and were checked against their own dis.
SUPPORTED = ((3, 11), (3, 12), (3, 13), (3, 14))


class UnsupportedPython(ImportError):
    """The running CPython has no bytecode table."""


def _select(version):
    key = tuple(version[:2])
    if key == (3, 11):
        from _portal.bytecode import v311 as table
    elif key == (3, 12):
        from _portal.bytecode import v312 as table
    elif key == (3, 13):
        from _portal.bytecode import v313 as table
    elif key == (3, 14):
        from _portal.bytecode import v314 as table
    else:
        names = ", ".join("%d.%d" % v for v in SUPPORTED)
        raise UnsupportedPython(
            f"portal: bytecode: CPython {key[0]}.{key[1]} is not one Portal's bytecode "
            f"layer knows (it knows {names}); run with one of those (portal-run --python PATH)")
    return table


T = _select(sys.version_info)
