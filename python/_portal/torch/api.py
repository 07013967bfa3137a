"""What differs between the torch versions Portal supports, asked of the torch in use.

torch 1.13 (Debian 12) and torch 2.x (Debian 13: 2.6) name the same things
differently; the plug-in (torch/objects.py) asks here, never a version number.  Each
answer is found by what the running torch has (an attribute, a module), so one
torch in between, or a later one, gets the answer its own API gives.  None of these
may warn: a deprecated spelling (2.x's ``Tensor.storage()``, the per-device
``torch.*_autocast_cpu_*`` functions) writes a warning to the program's stderr, a
difference from python that the program never asked for.
"""
import sys

#: The attribute of a ``torch.inference_mode`` object that holds its C++ guard
#: while the block is entered, with whether the torch deletes it on ``__exit__``:
#: 1.13's RAII guard is deleted; 2.x's context object stays after the exit.
INFERENCE_GUARD_ATTRIBUTES = {"_inference_mode_raii_guard": True,
                              "_inference_mode_context": False}

#: The modules that define ``GradScaler`` and ``_refresh_per_optimizer_state``:
#: 2.x's device-generic one first (``torch.cuda.amp``'s is a subclass of it there),
#: then 1.13's.
GRAD_SCALER_MODULES = ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler")

#: The devices whose autocast state is process-wide state to save (in this order
#: in the saved tuple), with the 1.13 names of their functions (2.x takes the
#: device type as an argument, and deprecates these).
AUTOCAST_DEVICES = ("cuda", "cpu")
_AUTOCAST_LEGACY = {
    "cuda": ("is_autocast_enabled", "set_autocast_enabled",
             "get_autocast_gpu_dtype", "set_autocast_gpu_dtype"),
    "cpu": ("is_autocast_cpu_enabled", "set_autocast_cpu_enabled",
            "get_autocast_cpu_dtype", "set_autocast_cpu_dtype"),
}


def _torch():
    return sys.modules["torch"]


# --- storages --------------------------------------------------------------------

def untyped_storage(t):
    """The ``UntypedStorage`` under tensor ``t`` (without 2.x's TypedStorage warning)."""
    own = getattr(t, "untyped_storage", None)
    return own() if own is not None else t.storage().untyped()


def set_storage(t, storage, offset, size, stride, dtype):
    """``t.set_`` onto an untyped ``storage``, viewed as ``dtype`` (``t``'s own).
    2.x sets a tensor on an UntypedStorage directly (and warns on making a
    TypedStorage); 1.13 needs the TypedStorage of the tensor's dtype."""
    torch = _torch()
    if hasattr(torch.Tensor, "untyped_storage"):
        return t.set_(storage, offset, size, stride)
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype)
    return t.set_(typed, offset, size, stride)


# --- inference mode --------------------------------------------------------------

def enter_inference_mode(mode):
    """A C++ inference-mode guard, entered: 1.13's enters when made, 2.x's is a
    context object that enters on ``__enter__``.  Keep it to stay entered."""
    torch = _torch()
    guard = torch._C._InferenceMode(mode)
    enter = getattr(guard, "__enter__", None)
    if enter is not None:
        enter()
    return guard


def inference_guard_name(ctx_dict):
    """The attribute of a ``torch.inference_mode`` object's dict that holds its
    guard, or None when it has none."""
    for name in INFERENCE_GUARD_ATTRIBUTES:
        if ctx_dict.get(name) is not None:
            return name
    return None


def inference_mode_is_entered(ctx_dict, enabled):
    """Whether a ``torch.inference_mode`` object (its dict) is entered, in a thread
    whose inference mode is ``enabled`` (the capture's: the pickler runs in a thread
    of its own, and the mode is per thread).  Where the torch deletes the guard on
    exit (1.13) that is its presence; where the guard stays after the exit (2.x: the
    object does not say), it is entered when it has a guard and the thread's mode is
    the one it sets (a block exited inside another of the same mode is taken as
    entered: the restored thread then holds one more guard of the mode in force)."""
    name = inference_guard_name(ctx_dict)
    if name is None:
        return False
    if INFERENCE_GUARD_ATTRIBUTES[name]:
        return True
    return bool(enabled) == bool(ctx_dict.get("mode", True))


# --- GradScaler --------------------------------------------------------------------

def grad_scaler_classes():
    """The ``GradScaler`` classes of the loaded torch (not importing any)."""
    out = []
    for name in GRAD_SCALER_MODULES:
        module = sys.modules.get(name)
        cls = getattr(module, "GradScaler", None)
        if cls is not None and cls not in out:
            out.append(cls)
    return out


def refresh_per_optimizer_state():
    """torch's factory of a fresh per-optimizer GradScaler state."""
    import importlib
    for name in GRAD_SCALER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        factory = getattr(module, "_refresh_per_optimizer_state", None)
        if factory is not None:
            return factory
    raise ImportError("portal: torch: no _refresh_per_optimizer_state in "
                      + " or ".join(GRAD_SCALER_MODULES))


# --- autocast ----------------------------------------------------------------------

def _per_device():
    """Whether this torch's autocast functions take the device type (2.x)."""
    return hasattr(_torch(), "get_autocast_dtype")


def autocast_state():
    """(cuda enabled, cuda dtype, cpu enabled, cpu dtype, cache enabled)."""
    torch = _torch()
    out = []
    for device in AUTOCAST_DEVICES:
        if _per_device():
            out += [torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)]
        else:
            is_on, _, get_dtype, _ = _AUTOCAST_LEGACY[device]
            out += [getattr(torch, is_on)(), getattr(torch, get_dtype)()]
    return tuple(out) + (torch.is_autocast_cache_enabled(),)


def set_autocast_state(state):
    """Set what ``autocast_state`` gave."""
    torch = _torch()
    *flat, cache = state
    for i, device in enumerate(AUTOCAST_DEVICES):
        enabled, dtype = flat[2 * i], flat[2 * i + 1]
        if _per_device():
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        else:
            _, set_on, _, set_dtype = _AUTOCAST_LEGACY[device]
            getattr(torch, set_on)(enabled)
            getattr(torch, set_dtype)(dtype)
    torch.set_autocast_cache_enabled(cache)
