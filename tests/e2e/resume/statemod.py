# A user module beside the script; its module-level state is mutated by the loop.
COUNTER = 0
LOG = []
CONFIG = {"scale": 3}


def record(value):
    global COUNTER
    COUNTER += 1  # [mod_oom]
    LOG.append(value * CONFIG["scale"])
    return COUNTER


def get_log():
    return LOG
