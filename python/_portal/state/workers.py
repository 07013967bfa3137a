"""Worker processes of the program that must end with a suspended process.

A DataLoader with `num_workers > 0` has worker processes that hold the
program's stdout and stderr (the supervisor's pipes to `portal logs` and the
terminal).  The suspended process leaves by os._exit(), which runs none of
torch's clean-up: the workers went on until their watchdog noticed the parent
gone (torch polls every 5 s), and the caller of `portal-run` waited for them,
since its output pipes stayed open.  shut_down() stops them as torch does when
an iterator is deleted (`_shutdown_workers`: the workers are told to leave,
joined, terminated if they do not), once the checkpoint holds what the
iterators were (their workers are started again at the resume).
"""
import sys


def shut_down():
    """Shut down the workers of every live multi-process DataLoader iterator."""
    module = sys.modules.get("torch.utils.data.dataloader")
    if module is None:
        return
    kind = getattr(module, "_MultiProcessingDataLoaderIter", None)
    if kind is None:
        return
    import gc
    for obj in gc.get_objects():
        # type(), not isinstance(): that would ask objects their __class__, and some
        # answer with a warning (torch.distributed.reduce_op)
        if issubclass(type(obj), kind):
            try:
                obj._shutdown_workers()
            except Exception:  # noqa: BLE001 - a worker that cannot be stopped dies with its watchdog
                pass
