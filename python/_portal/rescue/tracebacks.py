"""The one walk of an error's traceback that every stage of a rescue needs: from
the program's outermost frame down to the loop's frame, which called the rescue,
and on into the frames the error passed through inside it (their memory is what
suspend.py frees; their instructions say what the failed iteration had done).

Each entry is a traceback object: ``tb_frame``, and ``tb_lasti`` the
instruction that raised or made the call that raised.
"""


def loop_entry(exc, frame):
    """``frame``'s entry in ``exc``'s traceback, or None when the error did not
    pass through it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame is not frame:
        tb = tb.tb_next
    return tb


def inside(exc, frame):
    """The entries after ``frame``'s, outermost first: the frames the error passed
    through inside it (none when it did not pass through ``frame``)."""
    tb = loop_entry(exc, frame)
    out = []
    tb = tb.tb_next if tb is not None else None
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out
