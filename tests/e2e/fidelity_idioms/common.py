"""What every training script prints at its end: a digest of the model's weights
(every tensor's bytes, in state_dict order), so that two runs compare bit for bit."""
import hashlib


def digest(state_dict):
    h = hashlib.sha256()
    for name, tensor in state_dict.items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()
