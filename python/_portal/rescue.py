"""The rescue: what runs when an exception reaches a wrapped loop body.

Every loop body of the user's code is wrapped (instrument.py) as

    try: BODY
    except Exception:
        __portal_rescue__(LOOP_LINE)
        raise

so that an exception passing through a loop calls rescue() here, innermost loop
first, while that loop's frame is still running.  A while statement is wrapped
whole (no extra instruction per iteration) and its call passes the body's source
span too; an error of its condition or else clause is declined (suspend.py).
The stages, in order:
  1. decide: out of memory?  not inside an optimizer step?  not taken by a
     handler of the user's own further out?  (else return: the error goes on)
  2. capture the chain of frames from __main__ to this loop (capture.py); a
     loop that cannot be re-entered declines and the next loop out tries
  3. free the frames inside the loop (their memory: activations, temporaries)
  4. save: process state, modules, the checkpoint (suspend.py)
  5. suspend: say where and how to resume, exit 75
Returning (declining) lets the `raise` re-raise the error unchanged.
"""
import sys

from _portal import oom

# Set by the runtime (runtime.py) before the program starts.
RUNTIME = None


def rescue(loop_line, body_span=None):
    exc = sys.exception()
    if exc is None or not oom.is_out_of_memory(exc):
        return
    runtime = RUNTIME
    if runtime is None or not runtime.rescue_enabled:
        return
    loop_frame = sys._getframe(1)
    runtime.rescue(loop_frame, loop_line, exc)
