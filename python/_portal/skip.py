"""--policy oom.action=skip: the failed item is dropped and the loop goes on with
the next one, in the same process (docs/policies.md).

Called by suspend.py once decide.py has found this loop the point to continue
from (so every decline applies exactly as for a suspension).  What the failed
iteration consumed stays consumed: the batch, the random numbers it drew, the
iterator's advance (nothing is rolled back; the state decide.py captured is
dropped).  The frames inside the loop are cleared, cycles collected, and a
CUDA caching allocator's free blocks given back.  The instrumented handler
then `continue`s (instrument.py).  A while statement is wrapped whole, so its
handler is outside the loop and cannot continue it: skip falls back to
suspend there, and says so.
"""
import sys
import time

from _portal import jobs, oom_policy, store

# Fields of one skipped item in the job record's "skipped" list.
SKIPPED_KEY = "skipped"


def _say(subject, problem):
    sys.stderr.write(f"portal: {subject}: {problem}\n")


def skipped_so_far(job):
    try:
        return list(job.read_record().get(SKIPPED_KEY) or [])
    except (store.PortalError, OSError):
        return []


def try_skip(runtime, job, loop_frame, exc, error, point, free_inner_frames):
    """True when the item was skipped (the loop goes on), else the reason the
    rescue suspends instead (a `portal: skip:` line already said)."""
    loop = point.state.loop
    if not point.site.is_for:
        reason = (f"the while loop at {loop.filename}:{loop.line} is wrapped whole, so an item of it "
                  f"cannot be skipped: suspending instead")
        _say("skip", reason)
        return reason
    limit = oom_policy.max_skips(runtime.policy)
    skipped = skipped_so_far(job)
    if len(skipped) >= limit:
        reason = (f"{len(skipped)} items skipped already in job {job.id} (oom.max_skips={limit}): "
                  f"suspending instead")
        _say("skip", reason)
        return reason
    free_inner_frames(exc, loop_frame)
    point.state = point.frames = point.roots = None     # the capture is not needed
    import gc
    import linecache
    linecache.clearcache()
    gc.collect()
    if "torch" in sys.modules:
        from _portal import torch_state
        torch_state.release_cached_device_memory()
    iteration = loop.iteration_text or "an iteration the loop's iterator does not count"
    at = f" at {error.where}" if error.where else ""
    entry = dict(oom_policy.item_of(loop), iteration_text=loop.iteration_text, error=error.text,
                 error_at=error.where, at=jobs.utc_iso(time.time()))
    try:
        job.update_record(**{SKIPPED_KEY: skipped + [entry]})
    except (store.PortalError, OSError) as failure:
        _say("job", f"{job.id}: the skip could not be recorded ({failure})")
    for stream in (sys.stdout,):
        try:
            stream.flush()
        except Exception:   # noqa: BLE001 - the program's stream: not ours to fail on
            pass
    _say("skipped", f"{loop.filename}:{loop.line}, {iteration}: {error.text}{at} "
                    f"(skip {len(skipped) + 1} of at most {limit})")
    return True
