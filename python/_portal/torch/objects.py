"""Saving torch's objects and torch's process-wide state (a plug-in, see plugins.py).

Tensors
    A tensor is saved as ``(storage, dtype, offset, size, stride)`` plus its
    ``requires_grad``, ``.grad``, ``__dict__`` and leaf backward hooks.  Every
    storage is saved once, however many tensors view it (parameters, their views,
    an optimizer's aliases ...): the pickle memo keeps one ``_Storage`` wrapper per
    storage, so sharing survives the restore.  A CPU storage travels out of band as
    a ``PickleBuffer`` over its own memory (no copy is made; the checkpoint writer
    writes from it), and is restored on the checkpoint's private mapping of the
    pack file (no second copy).
    Parameters and other tensor subclasses are rebuilt with
    ``Tensor._make_subclass``; inference tensors in inference mode; quantized
    tensors (per-tensor and per-channel affine) with their quantizer; sparse COO
    tensors from their indices and values; meta tensors without data.
    CUDA tensors: see "CUDA" below.

Autograd graphs (autograd.py tells them apart)
    - a tensor with a live graph (``grad_fn`` set, the graph not consumed by
      ``backward()``) raises ``DeclineLoop``: saving it would silently cut the
      graph, so this loop is not the resume point and the next loop out is tried;
      except a view of a leaf (``w[0]`` of a Parameter), which is taken again on
      the restored leaf, so gradients still reach the leaf;
    - a tensor whose graph was consumed (backward() freed its buffers: going back
      through it again is an error anyway) is saved as a leaf with its values
      (``requires_grad=False``, as ``.detach()`` gives) and added to the
      pickling's ``PickleContext.cut``, which the suspend message names.

Refusals (the capture's error path names the variable holding the tensor)
    - other layouts (CSR, CSC ...), other devices (mps, xla ...), other quantizer
      schemes.

Training objects
    ``nn.Module`` (hooks included: they are functions in its dicts) and LR
    schedulers go through the generic machinery.  Optimizers are saved with their
    whole ``__dict__`` (``Optimizer.__getstate__`` drops the ``step`` counter
    wrapper an LR scheduler installs, and its ``_step_count``).  ``GradScaler`` is
    saved as at the start of an iteration (its per-optimizer stages cleared: the
    iteration runs again).  ``torch.inference_mode`` context objects that are
    entered are re-entered on restore.

Process-wide state (``capture_process``/``restore_process``)
    the CPU RNG (default generator) and, when CUDA was initialised, every CUDA
    device's RNG; grad mode and inference mode; the default dtype; the number of
    threads; deterministic algorithms (and warn-only), cuDNN flags (TF32 too) and
    float32 matmul precision (which is also CUDA matmul's allow_tf32); anomaly detection; autocast state.

CUDA (not run in CI: no GPU there; kept small and isolated: ``_spill_device_storage``
and ``_device_storage_from_host``)
    At capture a device storage is copied to the host in chunks of at most
    ``CUDA_CHUNK_BYTES`` into a *file-backed shared mapping* of an unlinked
    temporary file in the job's directory (``PORTAL_SPILL_DIR`` overrides): the
    pages are page cache the kernel can write back and drop, not private memory,
    so the extra host memory does not grow with the tensor, and no device memory
    is allocated (the copy reads the storage through a uint8 view of it).  At
    restore a storage saved from ``cuda:I`` goes to ``cuda:J`` where
    ``PORTAL_DEVICE_MAP`` (``"0:1,1:0"``, read in the resuming process) maps I to
    J, else to ``cuda:I``; it is copied up in the same chunks.
"""
import collections
import mmap
import os
import pickle
import sys
import tempfile
import weakref

from _portal.torch import api as torch_api
from _portal.checkpoint.refusals import DeclineLoop, Refuse
from _portal import job_contract  # the environment variables' names (contract/job_record.json)

PickleBuffer = pickle.PickleBuffer

#: Largest single host<->device copy.  Bounds the staging the CUDA runtime needs
#: for a pageable copy, and keeps each copy short.
CUDA_CHUNK_BYTES = 64 << 20

#: Inference-mode guards entered by the restore (kept alive until the program
#: leaves the ``with torch.inference_mode()`` block, or for good when none).
_HELD_GUARDS = []


class Unsupported(Refuse):
    """A torch object this plug-in knows it cannot save faithfully."""


class _Storage:
    """One storage, shared by all tensors that view it (one memo entry)."""
    __slots__ = ("storage", "__weakref__")

    def __init__(self, storage):
        self.storage = storage


class _Capture:
    """What the reducers keep for one pickling (in its PickleContext's scratch).
    storages: one wrapper per storage while the pickler holds it (its memo does,
    for the whole dump): weak, so that nothing of the program's memory is kept
    after a capture that the program survives; a live wrapper holds its storage,
    so while a wrapper is in here no other storage can have its key.  inference:
    the inference mode of the thread that started the capture (reducers()): the
    reducers run in the pickler's own thread, whose mode is its own."""
    __slots__ = ("storages", "inference")

    def __init__(self, torch):
        self.storages = weakref.WeakValueDictionary()
        self.inference = torch.is_inference_mode_enabled()


def _capture(context, torch):
    capture = context.scratch.get(__name__)
    if capture is None:
        capture = context.scratch[__name__] = _Capture(torch)
    return capture


def _torch():
    return sys.modules.get("torch")


# ---------------------------------------------------------------------------
# Load side (named in the stream: keep names and signatures stable).

def _rb_storage(buf):
    """A CPU storage over ``buf`` (the checkpoint's private mapping: no copy)."""
    import numpy as np
    import torch
    arr = np.frombuffer(buf, dtype=np.uint8)
    if not arr.flags.writeable:          # in-band bytes: torch needs writable memory
        arr = arr.copy()
    return torch_api.untyped_storage(torch.from_numpy(arr))


def _rb_device_storage(buf, device_type, index):
    """A device storage: the host bytes in ``buf`` copied to the mapped device."""
    return _device_storage_from_host(buf, device_type, _map_device(index))


def _plain(storage, dtype, offset, size, stride, quantizer=None):
    import torch
    if quantizer is None:
        t = torch.empty(0, dtype=dtype, device=storage.device)
    elif quantizer[0] == "per_tensor_affine":
        t = torch._empty_affine_quantized([0], scale=quantizer[1], zero_point=quantizer[2],
                                          dtype=dtype)
    else:
        _, scales, zero_points, axis = quantizer
        t = torch._empty_per_channel_affine_quantized(
            list(size), scales=scales, zero_points=zero_points, axis=axis, dtype=dtype)
    return torch_api.set_storage(t, storage, offset, size, stride, dtype)


def _rb_tensor(cls, storage, dtype, offset, size, stride, requires_grad, quantizer,
               inference):
    import torch
    if inference:
        with torch.inference_mode():
            t = _plain(storage, dtype, offset, size, stride, quantizer)
    else:
        t = _plain(storage, dtype, offset, size, stride, quantizer)
    return _finish(t, cls, requires_grad)


def _rb_view_of_leaf(base, offset, size, stride):
    """A view of a leaf that requires grad: the gradient flows to the leaf again."""
    import torch
    with torch.enable_grad():
        return base.as_strided(size, stride, offset)


def _rb_meta(cls, dtype, size, stride, requires_grad):
    import torch
    t = torch.empty_strided(size, stride, dtype=dtype, device="meta")
    return _finish(t, cls, requires_grad)


def _rb_sparse_coo(cls, indices, values, size, coalesced, requires_grad):
    import torch
    t = torch.sparse_coo_tensor(indices, values, size)._coalesced_(coalesced)
    return _finish(t, cls, requires_grad)


def _finish(t, cls, requires_grad):
    import torch
    if cls is not torch.Tensor:          # Parameter, its subclasses, user subclasses
        return torch.Tensor._make_subclass(cls, t, requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _set_tensor_state(t, state):
    grad, tdict, hooks = state
    if grad is not None:
        t.grad = grad
    if tdict:
        t.__dict__.update(tdict)
    if hooks is not None:
        t._backward_hooks = hooks


def _rb_generator(device, state):
    import torch
    g = torch.Generator(device)
    g.set_state(state)
    return g


def _rb_default_generator(state):
    import torch
    torch.default_generator.set_state(state)
    return torch.default_generator


def _rb_cuda_default_generator(index, state):
    """A CUDA device's default generator, in place, on the mapped device."""
    import torch
    g = torch.cuda.default_generators[_map_device(index)]
    g.set_state(state)
    return g


def _rb_object(cls):
    return cls.__new__(cls)


def _set_dict(obj, d):
    obj.__dict__.update(d)


def _set_inference_mode(obj, d):
    d = dict(d)
    entered = d.pop("_portal_entered", False)
    obj.__dict__.update(d)
    if entered:          # the attribute name this torch's inference_mode uses
        setattr(obj, entered if isinstance(entered, str) else "_inference_mode_raii_guard",
                torch_api.enter_inference_mode(obj.mode))


# ---------------------------------------------------------------------------
# Dump side.

def _refuse(reason):
    raise Unsupported(reason)


def _state(t):
    leaf = t.grad_fn is None
    hooks = t._backward_hooks if leaf else None
    grad = t.grad if leaf or t.retains_grad else None   # no warning for other non-leaves
    if grad is None and not t.__dict__ and not hooks:
        return None
    return (grad, dict(t.__dict__) or None, hooks or None)


def reduce_tensor(t, capture, cut):
    """Any tensor (Parameter and other subclasses too); one saved as a leaf, its
    graph consumed, is added to `cut` (the report names it)."""
    torch = _torch()
    requires_grad = t.requires_grad
    if t.grad_fn is not None:
        base = _leaf_base(t)
        if base is not None:
            return (_rb_view_of_leaf, (base, t.storage_offset(), tuple(t.shape), t.stride()),
                    _state(t), None, None, _set_tensor_state)
        from _portal.fidelity import autograd
        if autograd.graph_state(t) == "live":
            raise DeclineLoop(f"a tensor in a live autograd graph (grad_fn={type(t.grad_fn).__name__}): "
                              f"it could still be back-propagated, and saving it would cut its graph")
        cut.append(t)                   # saved as a leaf; the suspend message names it
        t, requires_grad = t.detach(), False
    cls = type(t)
    if t.layout == torch.sparse_coo:
        d = t.detach()
        return (_rb_sparse_coo, (cls, d._indices(), d._values(), tuple(t.shape),
                                 t.is_coalesced(), requires_grad),
                _state(t), None, None, _set_tensor_state)
    if t.layout != torch.strided:
        _refuse(f"tensors of layout {t.layout} are not supported (only strided and "
                f"sparse COO); convert it, e.g. with .to_sparse() or .to_dense()")
    if t.device.type == "meta":
        return (_rb_meta, (cls, t.dtype, tuple(t.shape), t.stride(), requires_grad),
                _state(t), None, None, _set_tensor_state)
    if t.device.type not in ("cpu", "cuda"):
        _refuse(f"tensors on {t.device.type} devices are not supported (cpu and cuda are)")
    quantizer = _quantizer(t) if t.is_quantized else None
    storage = torch_api.untyped_storage(t)
    key = storage._cdata
    wrapper = capture.storages.get(key)
    if wrapper is None:
        wrapper = capture.storages[key] = _Storage(storage)
    return (_rb_tensor, (cls, wrapper, t.dtype, t.storage_offset(), tuple(t.shape),
                         t.stride(), requires_grad, quantizer, t.is_inference()),
            _state(t), None, None, _set_tensor_state)


def _leaf_base(t):
    """The leaf a differentiable view was taken from (``w[0]``, ``p.chunk(2)``,
    ``p.t()`` of a Parameter), when the view can be taken again on the restored
    leaf: same dtype and device, strided.  Its graph is then rebuilt, not cut."""
    torch = _torch()
    if not t._is_view() or t.layout != torch.strided or t.is_quantized:
        return None
    base = t._base
    if base is None or base.grad_fn is not None or not base.requires_grad or \
            base.dtype != t.dtype or base.device != t.device:
        return None
    return base


def _quantizer(t):
    torch = _torch()
    scheme = t.qscheme()
    if scheme == torch.per_tensor_affine:
        return ("per_tensor_affine", t.q_scale(), t.q_zero_point())
    if scheme in (torch.per_channel_affine, torch.per_channel_affine_float_qparams):
        return ("per_channel_affine", t.q_per_channel_scales(),
                t.q_per_channel_zero_points(), t.q_per_channel_axis())
    _refuse(f"quantized tensors with scheme {scheme} are not supported")


def reduce_storage(wrapper, trial=False, spill_dir=None):
    storage = wrapper.storage
    if storage.device.type == "cpu":
        torch = _torch()
        u8 = torch.empty(0, dtype=torch.uint8).set_(storage)
        return (_rb_storage, (PickleBuffer(u8.numpy()),))
    if trial:   # decide.py's trial pickling: nothing is copied off the device
        return (_rb_device_storage, (PickleBuffer(bytearray()), storage.device.type,
                                     storage.device.index or 0))
    return (_rb_device_storage, (_spill_device_storage(storage, spill_dir=spill_dir),
                                 storage.device.type, storage.device.index or 0))


def reduce_generator(g):
    torch = _torch()
    if g is torch.default_generator:
        return (_rb_default_generator, (g.get_state(),))
    if g.device.type == "cuda" and any(g is d for d in torch.cuda.default_generators):
        return (_rb_cuda_default_generator, (g.device.index or 0, g.get_state()))
    return (_rb_generator, (str(g.device), g.get_state()))


def reduce_optimizer(opt):
    """All of its __dict__: ``Optimizer.__getstate__`` keeps only defaults, state
    and param_groups, losing an LR scheduler's step-counting wrapper."""
    return (_rb_object, (type(opt),), dict(opt.__dict__), None, None, _set_optimizer_dict)


def _set_optimizer_dict(opt, d):
    opt.__dict__.update(d)
    grads = sys.modules.get("_portal.fidelity.grads")
    if grads is not None:   # its parameters' gradients are watched again (grads.py)
        grads.register(opt)


def reduce_grad_scaler(scaler):
    """As at the start of an iteration: the iteration that failed runs again, so
    what it did to the per-optimizer stages (unscaled, stepped) is forgotten."""
    d = dict(scaler.__dict__)
    if "_per_optimizer_states" in d:         # only an enabled scaler has them
        d["_per_optimizer_states"] = collections.defaultdict(
            torch_api.refresh_per_optimizer_state())
    return (_rb_object, (type(scaler),), d, None, None, _set_dict)


def reduce_inference_mode(ctx, capture):
    d = dict(ctx.__dict__)
    entered = torch_api.inference_mode_is_entered(d, capture.inference)
    name = torch_api.inference_guard_name(d)
    for attribute in torch_api.INFERENCE_GUARD_ATTRIBUTES:
        d.pop(attribute, None)               # a guard is entered again, never pickled
    d["_portal_entered"] = name if entered else False
    return (_rb_object, (type(ctx),), d, None, None, _set_inference_mode)


def reducers(context):
    """Exact types, for the pickling `context` is of (its _Capture)."""
    torch = _torch()
    if torch is None:
        return {}
    capture = _capture(context, torch)
    out = {_Storage: lambda wrapper: reduce_storage(wrapper, context.trial, context.spill_dir),
           torch._C.Generator: reduce_generator}
    mode = getattr(torch.autograd.grad_mode, "inference_mode", None)
    if mode is not None:
        out[mode] = lambda ctx: reduce_inference_mode(ctx, capture)
    return out


def subclass_reducers(context):
    torch = _torch()
    if torch is None:
        return {}
    capture = _capture(context, torch)
    out = {torch.Tensor: lambda t: reduce_tensor(t, capture, context.cut),
           torch.optim.Optimizer: reduce_optimizer}
    for cls in torch_api.grad_scaler_classes():
        out[cls] = reduce_grad_scaler
    return out


# ---------------------------------------------------------------------------
# Process-wide state.

def capture_process():
    torch = _torch()
    if torch is None:
        return None
    s = {
        "rng": torch.get_rng_state(),
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "dtype": torch.get_default_dtype(),
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn": (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark,
                  torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32),
        "autocast": torch_api.autocast_state(),
        "cuda_rng": None,
    }
    if torch.cuda.is_initialized():     # never initialise CUDA just to save it
        s["cuda_rng"] = [state.cpu() for state in torch.cuda.get_rng_state_all()]
    return s


def restore_process(s):
    import torch
    torch.set_rng_state(s["rng"])
    torch.set_grad_enabled(s["grad"])
    if s["inference"] and not torch.is_inference_mode_enabled():
        # no entered inference_mode object was restored: hold a guard for good
        _HELD_GUARDS.append(torch_api.enter_inference_mode(True))
    torch.set_default_dtype(s["dtype"])
    if torch.get_num_threads() != s["threads"]:
        torch.set_num_threads(s["threads"])
    torch.use_deterministic_algorithms(s["deterministic"],
                                       warn_only=s["deterministic_warn_only"])
    torch.set_anomaly_enabled(s["anomaly"])
    torch.set_float32_matmul_precision(s["matmul_precision"])  # also CUDA's allow_tf32
    (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark,
     torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32) = s["cudnn"]
    torch_api.set_autocast_state(s["autocast"])
    if s["cuda_rng"] is not None and torch.cuda.is_available():
        for index, state in enumerate(s["cuda_rng"]):
            target = _map_device(index)
            if target < torch.cuda.device_count():
                torch.cuda.set_rng_state(state, target)


# ---------------------------------------------------------------------------
# CUDA: the only code that touches a device.  Not run in CI (no GPU there); the
# chunking and the device map are unit-tested on CPU.

def release_cached_device_memory():
    """Give the CUDA caching allocator's free blocks back to the driver (meant to
    be called by the capture once the frames inside the loop are cleared, so the
    memory they held is not kept cached by a process that is about to exit or to
    go on with less).  Does nothing unless the program initialised CUDA."""
    torch = _torch()
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def copy_in_chunks(src, dst, chunk_bytes=None):
    """Copy 1-D uint8 tensor ``src`` into ``dst`` (same length), at most
    ``chunk_bytes`` per copy: no copy needs staging larger than a chunk."""
    chunk = chunk_bytes or CUDA_CHUNK_BYTES
    n = len(dst)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        dst[start:stop].copy_(src[start:stop])


def _spill_dir(job_dir):
    explicit = os.environ.get(job_contract.ENV_SPILL_DIR)
    return explicit or job_dir or tempfile.gettempdir()


def _spill_device_storage(storage, chunk_bytes=None, spill_dir=None):
    """A PickleBuffer of a device storage's bytes, over a shared mapping of an
    unlinked temporary file (page cache, not private memory); no device memory
    is allocated.  Works for a CPU storage too (that is how it is tested)."""
    torch = _torch()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return PickleBuffer(bytearray())
    with tempfile.TemporaryFile(dir=_spill_dir(spill_dir), prefix=".portal-spill-") as f:
        os.ftruncate(f.fileno(), nbytes)
        mapping = mmap.mmap(f.fileno(), nbytes, mmap.MAP_SHARED,
                            mmap.PROT_READ | mmap.PROT_WRITE)
    dst = torch.frombuffer(mapping, dtype=torch.uint8)
    src = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    copy_in_chunks(src, dst, chunk_bytes)
    del dst, src
    return PickleBuffer(mapping)


def _device_storage_from_host(buf, device_type, index, chunk_bytes=None):
    import torch
    device = torch.device(device_type, index) if device_type != "cpu" else torch.device("cpu")
    if device_type == "cuda" and index >= torch.cuda.device_count():
        raise RuntimeError(
            f"portal: cuda:{index}: this machine has {torch.cuda.device_count()} cuda "
            f"device(s); map the saved devices, e.g. portal resume JOB --device-map 0:0")
    src = _rb_storage(buf)
    host = torch.empty(0, dtype=torch.uint8).set_(src)
    dst = torch.empty(len(host), dtype=torch.uint8, device=device)
    copy_in_chunks(host, dst, chunk_bytes)
    return torch_api.untyped_storage(dst)


def parse_device_map(text):
    """``"0:1,2:0"`` -> {0: 1, 2: 0}; ValueError naming the bad item."""
    out = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        src, sep, dst = item.partition(":")
        try:
            if not sep:
                raise ValueError
            out[int(src)] = int(dst)
        except ValueError:
            raise ValueError(f"portal: PORTAL_DEVICE_MAP: {item!r} is not FROM:TO "
                             f"(device indexes, e.g. 0:1)") from None
    return out


#: The resuming process's PORTAL_DEVICE_MAP (``portal resume --device-map``), pinned
#: by restore/resume.py before the job's own environment replaces the process's: the CUDA
#: generators are restored after that (``restore_process``), and must be mapped as
#: the tensors were.  Empty until pinned (then os.environ is read).
_PINNED_DEVICE_MAP = {}


def pin_device_map(environ=os.environ):
    """Fix the device map to `environ`'s PORTAL_DEVICE_MAP for the rest of the process."""
    _PINNED_DEVICE_MAP[job_contract.ENV_DEVICE_MAP] = environ.get(job_contract.ENV_DEVICE_MAP)


def _map_device(index, environ=None):
    if environ is None:
        environ = _PINNED_DEVICE_MAP or os.environ
    return parse_device_map(environ.get(job_contract.ENV_DEVICE_MAP)).get(index, index)
