"""What every script of the corpus shares: the digest of a model's weights (every
tensor's bytes, in state_dict order) and a loss printed to the last bit, so that
two runs compare bit for bit."""
import hashlib


def digest(state_dict):
    h = hashlib.sha256()
    for name, tensor in state_dict.items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def exact(value):
    """A float or a tensor's sum, to the last bit (detached: torch 2.14 warns on
    stderr when a tensor that requires grad becomes a float)."""
    value = value.sum() if hasattr(value, "sum") else value
    return float(value.detach() if hasattr(value, "detach") else value).hex()


# A real out-of-memory error inside one step, for the tests under `portal-run --mem`:
# the SPIKE_AT-th call of spike() asks for SPIKE_MIB of memory (torch.empty leaves the
# pages untouched: the data-segment cap counts them, the machine barely does), more
# than the cap leaves; the step then goes on with its value, unchanged.
_SPIKE = {"calls": 0}


def spike(value):
    import os
    _SPIKE["calls"] += 1
    if str(_SPIKE["calls"]) == os.environ.get("SPIKE_AT"):
        import torch
        scratch = torch.empty(int(os.environ.get("SPIKE_MIB", "3072")) << 20, dtype=torch.uint8)
        del scratch
    return value
