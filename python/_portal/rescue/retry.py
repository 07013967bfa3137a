"""--policy oom.action=retry: the checkpoint is written as for a suspension, and
the supervisor (portal-run, or `portal resume`) resumes it at once in a fresh
interpreter process on the same machine (docs/policies.md): a fresh heap and, on
a GPU, a fresh CUDA context.

The interpreter decides, the supervisor only acts: the record's
`retry_requested` field (written with the suspension, under the record's lock)
names the item and says whether CUDA was in use and whether the program's
environment sets PYTORCH_CUDA_ALLOC_CONF; the supervisor (src/launcher/
job_run.cpp) then starts a run of kind "retry" carrying that item, with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when CUDA was in use and the
program did not set it.  An item already retried oom.retries times is suspended
as usual.
"""
import os
import sys

from _portal.rescue import policy as oom_policy
from _portal.store import trust as store

REQUEST_KEY = "retry_requested"     # read and removed by src/launcher/job_run.cpp
RETRY_RUN_KIND = "retry"            # the supervisor's run kind (job_run.cpp)
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def retries_of(job, item):
    """How many retry runs this job has had for `item` (job_run.cpp records the
    item with each)."""
    try:
        runs = job.read_record().get("runs") or []
    except (store.PortalError, OSError):
        return 0
    return sum(1 for run in runs if isinstance(run, dict) and run.get("kind") == RETRY_RUN_KIND
               and run.get("item") == item)


def _cuda_in_use():
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:   # noqa: BLE001 - a torch without CUDA support
        return False


def decide(runtime, job, loop):
    """(request fields, None) to retry this item, or (None, the reason it is
    suspended instead)."""
    item = oom_policy.item_of(loop)
    done, allowed = retries_of(job, item), oom_policy.retries(runtime.policy)
    if done >= allowed:
        times = "once" if done == 1 else f"{done} times"
        return None, (f"this item was retried {times} already (oom.retries={allowed}): "
                      f"suspended as usual")
    return dict(item, attempt=done + 1, of=allowed, cuda=_cuda_in_use(),
                user_alloc_conf=ALLOC_CONF in os.environ), None
