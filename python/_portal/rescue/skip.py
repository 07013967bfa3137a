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

from _portal.store import jobs, trust as store
from _portal.rescue import policy as oom_policy

# The job record's list of skipped items (the last SKIPPED_KEPT of them, each
# field cut to ENTRY_TEXT_MAX characters) and their count, whatever it grows to:
# the record stays far below its RECORD_MAX_BYTES (4000 skips once made it
# unreadable, and an unreadable count let every item be skipped).
SKIPPED_KEY = "skipped"
COUNT_KEY = "skipped_count"
SKIPPED_KEPT = 20
ENTRY_TEXT_MAX = 400

# The count this process last recorded: a floor for the record's own, should it
# be read back lower (never fewer skips are counted than were made here).
_counted = [0]


def _say(subject, problem):
    from _portal.run import lines
    lines.start()   # on a line of its own, after a progress bar's unfinished line too
    sys.stderr.write(f"portal: {subject}: {problem}\n")


def count_of(record):
    """Items skipped in the job so far: its count, or its list's length for a
    record written before the count was kept."""
    count = record.get(COUNT_KEY)
    listed = record.get(SKIPPED_KEY)
    listed = len(listed) if isinstance(listed, list) else 0
    return max(count if isinstance(count, int) and not isinstance(count, bool) else 0, listed)


def skipped_so_far(job):
    """The count, or None when the record cannot be read (then no item is
    skipped: a count not known is not honoured by guessing)."""
    try:
        return max(count_of(job.read_record()), _counted[0])
    except (store.PortalError, OSError, ValueError):
        return None


def _cut(text):
    if isinstance(text, str) and len(text) > ENTRY_TEXT_MAX:
        return text[:ENTRY_TEXT_MAX] + f"... ({len(text)} characters)"
    return text


def _record_skip(record, entry):
    """One more skipped item: counted, listed, the list cut to its last SKIPPED_KEPT."""
    count = max(count_of(record), _counted[0]) + 1
    listed = record.get(SKIPPED_KEY)
    listed = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
    record[SKIPPED_KEY] = (listed + [entry])[-SKIPPED_KEPT:]
    record[COUNT_KEY] = count
    _counted[0] = count


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
    if skipped is None:
        reason = (f"job {job.id}'s record could not be read, so its count of skipped items "
                  f"(oom.max_skips={limit}) is not known: suspending instead")
        _say("skip", reason)
        return reason
    if skipped >= limit:
        reason = (f"{skipped} items skipped already in job {job.id} (oom.max_skips={limit}): "
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
        from _portal.torch import objects as torch_state
        torch_state.release_cached_device_memory()
    iteration = loop.iteration_text or "an iteration the loop's iterator does not count"
    at = f" at {error.where}" if error.where else ""
    entry = dict(oom_policy.item_of(loop), iteration_text=_cut(loop.iteration_text), error=_cut(error.text),
                 error_at=_cut(error.where), at=jobs.utc_iso(time.time()))
    entry["loop"] = _cut(entry["loop"])
    try:
        job.modify_record(lambda record: _record_skip(record, entry))
    except (store.PortalError, OSError, ValueError) as failure:
        _counted[0] = skipped + 1       # counted here all the same: the next skip sees it
        _say("job", f"{job.id}: the skip could not be recorded ({failure})")
    for stream in (sys.stdout,):
        try:
            stream.flush()
        except Exception:   # noqa: BLE001 - the program's stream: not ours to fail on
            pass
    _say("skipped", f"{loop.filename}:{loop.line}, {iteration}: {error.text}{at} "
                    f"(skip {skipped + 1} of at most {limit})")
    return True
