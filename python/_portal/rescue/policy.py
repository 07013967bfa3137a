"""The job's out-of-memory policy (docs/policies.md): what the rescue does once
decide.py has found the loop to continue from.

    oom.action=suspend   write the checkpoint, exit 75 (the default)
    oom.action=retry     write the checkpoint, exit 75 asking the supervisor to
                         resume it at once in a fresh interpreter (retry.py)
    oom.action=skip      drop the failed item, go on with the next one (skip.py)
    oom.retries=N        retries of one item before suspending (default 1)
    oom.max_skips=N      skipped items per job before suspending (default 10)

portal-run validates the values (src/launcher/policy.cpp); they reach the
runtime as strings (runtime.policy) and are read here only.
"""
SUSPEND, RETRY, SKIP = "suspend", "retry", "skip"
DEFAULT_ACTION = SUSPEND
DEFAULT_RETRIES = 1
DEFAULT_MAX_SKIPS = 10


def action(policy):
    value = policy.get("oom.action", DEFAULT_ACTION)
    return value if value in (SUSPEND, RETRY, SKIP) else DEFAULT_ACTION


def _count(policy, key, default):
    try:
        return max(0, int(policy.get(key, default)))
    except (TypeError, ValueError):
        return default


def retries(policy):
    return _count(policy, "oom.retries", DEFAULT_RETRIES)


def max_skips(policy):
    return _count(policy, "oom.max_skips", DEFAULT_MAX_SKIPS)


def item_of(loop):
    """The item a policy counts by: the loop (file:line) and its iteration (None
    when the loop's iterator does not tell)."""
    return {"loop": f"{loop.filename}:{loop.line}", "iteration": loop.iteration}
