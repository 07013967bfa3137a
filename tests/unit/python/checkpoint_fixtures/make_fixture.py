"""Write the checkpoint of state.py's expected_state() with the writer on PYTHONPATH:

    PYTHONPATH=<that portal's python dir> /usr/bin/python3 make_fixture.py OUT

vN/ holds what the last writer of format version N wrote (the files of OUT/job,
its manifest signed with the all-zero key; the test signs it again with its own).
The fixtures are never made again: they are what an old Portal left on disk."""
import os
import sys

from _portal import checkpoint
from _portal.codeindex import CodeRegistry

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from state import expected_state  # noqa: E402

kw = dict(registry=CodeRegistry(), modules={})
try:
    from _portal import plugins      # the writers that had plug-ins pass their reducers
    kw["reducers"], kw["subclass_reducers"] = plugins.reducers()
except ImportError:
    pass
try:
    info = checkpoint.write_checkpoint(sys.argv[1], "job", expected_state(), None, {},
                                       key=bytes(32), **kw)
except TypeError:                    # a writer without the key argument
    info = checkpoint.write_checkpoint(sys.argv[1], "job", expected_state(), None, {}, **kw)
print(info.manifest.get("format_version"), info.path)
