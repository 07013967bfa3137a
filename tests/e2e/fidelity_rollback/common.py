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
    """A float or a tensor's sum, to the last bit."""
    return float(value.sum() if hasattr(value, "sum") else value).hex()
