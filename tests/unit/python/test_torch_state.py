"""_portal.torch.objects: torch's tensors, training objects and process state.

Each test writes a real checkpoint (ckwrite.write_checkpoint with the plug-in
reducers, as the capture does) and reads it back (read_checkpoint, as the resume
does), so restored tensors live on the pack files' mappings, never on the
original's memory.
"""
import collections
import os
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch")

from _portal.checkpoint import read as ckread, write as ckwrite  # noqa: E402
from _portal.state import plugins
from _portal.torch import objects as torch_state
from _portal.run.codeindex import CodeRegistry, Recompiler  # noqa: E402
from _portal.checkpoint.context import PickleContext  # noqa: E402
from _portal.checkpoint.reducers import DeclineLoop, Unsaveable  # noqa: E402


def compile_fn(source, filename):
    return compile(source, filename, "exec", dont_inherit=True)


class Program:
    """User modules of a simulated program, saved and restored through a checkpoint."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.registry = CodeRegistry()
        self.modules = {}
        self.count = 0

    def module(self, name, source):
        source = textwrap.dedent(source)
        path = self.dir / f"{name}.py"
        path.write_text(source)
        code = compile_fn(source.encode(), str(path))
        self.registry.register(str(path), code, source.encode())
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        sys.modules[name] = mod
        self.modules[name] = mod
        exec(code, mod.__dict__)
        return mod

    def write(self, state, roots=None, context=None):
        exact, inherited = plugins.reducers(context)
        self.count += 1
        name = f"ck{self.count}"
        info = ckwrite.write_checkpoint(
            self.dir / "jobs", name, state, roots, {"sources": self.registry.sources()},
            registry=self.registry, modules=self.modules, reducers=exact,
            subclass_reducers=inherited)
        return info

    def read(self, info):
        for name in self.modules:
            sys.modules.pop(name, None)
        _, restored = ckread.read_checkpoint(info.path, Recompiler(compile_fn),
                                                 main_module=types.ModuleType("__main__"))
        return restored

    def roundtrip(self, state, context=None):
        """(restored state, blob bytes) after a checkpoint write and read."""
        info = self.write(state, context=context)
        blobs = sum(size for _, _, size in info.manifest["buffers"])
        return self.read(info), blobs


@pytest.fixture
def program(tmp_path):
    saved = dict(sys.modules)
    p = Program(tmp_path)
    yield p
    # The program's own modules are forgotten; a library's modules imported meanwhile
    # stay: torch 2.x imports torch._dynamo lazily (torch.manual_seed does), whose
    # import registers C++ operator libraries once per process, so a second import
    # of a forgotten one fails ("Only a single TORCH_LIBRARY ...").
    for key in list(sys.modules):
        if key not in saved and (key in p.modules or _under(sys.modules[key], tmp_path)):
            del sys.modules[key]
    sys.modules.update(saved)


def _under(module, directory):
    path = getattr(module, "__file__", None) or ""
    return str(path).startswith(str(directory) + os.sep)


def raw_bytes(t):
    """The bytes of a tensor's elements, in logical order (any dtype)."""
    c = t.detach().contiguous()
    storage = c.storage().untyped()
    u8 = torch.empty(0, dtype=torch.uint8).set_(storage)
    start = c.storage_offset() * c.element_size()
    return bytes(u8[start:start + c.numel() * c.element_size()].tolist())


# --- tensors ----------------------------------------------------------------------

def test_shared_storage_is_written_once_and_stays_shared(program):
    base = torch.arange(256 * 1024, dtype=torch.float32)          # 1 MiB
    param = torch.nn.Parameter(base[:1024].view(32, 32))          # a Parameter on it
    state = {"base": base, "rows": base.view(512, 512)[::2], "param": param,
             "t": base.view(512, 512).t(), "again": base}
    s, blobs = program.roundtrip(state)
    assert blobs == base.numel() * 4                               # one storage, once
    assert isinstance(s["param"], torch.nn.Parameter) and s["param"].requires_grad
    for key in ("rows", "t"):
        assert torch.equal(s[key], state[key]) and s[key].stride() == state[key].stride()
    assert s["again"] is s["base"]
    s["base"][0] = -5                                               # one memory
    assert s["rows"][0, 0] == -5 and s["t"][0, 0] == -5 and s["param"][0, 0] == -5


def test_storage_goes_out_of_band_from_its_own_memory(program):
    t = torch.arange(1 << 16, dtype=torch.int64)
    exact, inherited = plugins.reducers()
    from _portal.checkpoint import reducers
    data, buffers = reducers.dumps({"t": t}, registry=program.registry, modules={},
                                   reducers=exact, subclass_reducers=inherited)
    import numpy as np
    assert len(buffers) == 1 and len(data) < 2048
    assert np.frombuffer(buffers[0], np.uint8).ctypes.data == t.data_ptr()   # no copy


def test_restored_tensor_lives_in_the_memory_its_pack_file_was_read_into(program):
    # checkpoint/format.py reads each pack file into one private anonymous mapping and
    # builds the storages on it: no copy, no mapping of the file left
    t = torch.ones(1 << 20, dtype=torch.float32)                   # 4 MiB
    s, _ = program.roundtrip({"t": t})
    address = s["t"].data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            span, *rest = line.split()
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                assert len(rest) == 4 and rest[0].startswith("rw-p"), line   # no file
                assert address + t.numel() * t.element_size() <= hi, line
                break
        else:
            pytest.fail("restored tensor's memory is not mapped")
    s["t"][0] = 3                                                   # private mapping
    assert t[0] == 1


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex32,
          torch.complex64, torch.complex128, torch.uint8, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.bool]
#: The element types torch 2.x added (wider unsigned, float8, the bit containers and
#: the sub-byte integers), each where the torch in use has it.
NEWER_DTYPES = ["uint16", "uint32", "uint64", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz",
                "float8_e4m3fnuz", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
                *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)),
                "bcomplex32", "float4_e2m1fn_x2", "float8_e8m0fnu"]   # in 2.14
DTYPES += [getattr(torch, name) for name in NEWER_DTYPES if hasattr(torch, name)]


def test_every_dtype_round_trips_bit_for_bit(program):
    g = torch.Generator().manual_seed(0)
    state = {}
    for dtype in DTYPES:
        size = torch.empty(0, dtype=dtype).element_size()
        bits = torch.randint(0, 256, (7 * 3 * size,), dtype=torch.uint8, generator=g)
        t = torch.empty(7, 3, dtype=dtype)
        torch.empty(0, dtype=torch.uint8).set_(t.storage().untyped()).copy_(bits)
        state[str(dtype)] = t
    x = torch.randn(4, 6, generator=g)
    state["quint8"] = torch.quantize_per_tensor(x, 0.1, 3, torch.quint8)
    state["qint8"] = torch.quantize_per_tensor(x, 0.05, 0, torch.qint8)
    state["qint32"] = torch.quantize_per_tensor(x, 0.01, 1, torch.qint32)
    state["quint4x2"] = torch.quantize_per_tensor(x, 0.5, 2, torch.quint4x2)
    state["quint2x4"] = torch.quantize_per_tensor(x, 0.5, 1, torch.quint2x4)
    state["per_channel"] = torch.quantize_per_channel(
        x, torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0, 1, 2, 3]), 0, torch.quint8)
    every = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert {t.dtype for t in state.values()} == every            # none left out
    s, _ = program.roundtrip(state)
    for key, t in state.items():
        r = s[key]
        assert r.dtype == t.dtype and r.shape == t.shape, key
        if t.is_quantized:
            assert r.qscheme() == t.qscheme() and torch.equal(r.int_repr(), t.int_repr())
            assert torch.equal(r.dequantize(), t.dequantize()), key
        else:
            assert raw_bytes(r) == raw_bytes(t), key


def test_saving_and_restoring_warns_nothing(program, monkeypatch):
    # torch 2.x deprecates TypedStorage and Tensor.storage() with a UserWarning (once
    # per process unless told to always): a warning of Portal's would be on the
    # program's stderr, where python prints none
    import warnings
    always = getattr(torch.storage, "_set_always_warn_typed_storage_removal", None)
    if always is not None:
        monkeypatch.setattr(torch.storage, "_always_warn_typed_storage_removal", True)
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 3, torch.quint8)
    state = {"t": torch.arange(12.0).view(3, 4)[1:], "q": q, "p": torch.nn.Parameter(torch.ones(2))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s, _ = program.roundtrip(state)
    assert torch.equal(s["t"], state["t"]) and torch.equal(s["q"].int_repr(), q.int_repr())


def test_non_contiguous_zero_size_and_scalar_tensors(program):
    a = torch.arange(60, dtype=torch.float64).reshape(3, 4, 5)
    state = {"perm": a.permute(2, 0, 1), "step": a[:, ::2, 1:], "expand": torch.ones(3, 1).expand(3, 4),
             "neg": a.flip(0), "empty": torch.empty(0, 5), "empty_view": a[:, :0],
             "scalar": torch.tensor(2.5), "channels_last": torch.randn(2, 3, 4, 5).to(
                 memory_format=torch.channels_last)}
    s, _ = program.roundtrip(state)
    for key, t in state.items():
        assert torch.equal(s[key], t) and s[key].stride() == t.stride(), key
        assert s[key].storage_offset() == t.storage_offset(), key


def test_parameters_subclasses_grad_and_leaf_hooks(program):
    mod = program.module("umod", """
        import torch
        class Tagged(torch.nn.Parameter):
            pass
        class Plain(torch.Tensor):
            pass
        seen = []
        def hook(grad):
            seen.append(float(grad.sum()))
        def make():
            w = Tagged(torch.ones(2, 2))
            w.tag = "kept"
            (w * 3).sum().backward()
            leaf = torch.ones(3, requires_grad=True)
            leaf.register_hook(hook)
            frozen = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
            return {"w": w, "leaf": leaf, "frozen": frozen,
                    "plain": torch.arange(3.0).as_subclass(Plain)}
    """)
    s, _ = program.roundtrip(mod.make())
    m2 = sys.modules["umod"]
    w = s["w"]
    assert type(w) is m2.Tagged and w.requires_grad and w.tag == "kept"
    assert torch.equal(w.grad, torch.full((2, 2), 3.0))
    assert type(s["plain"]) is m2.Plain and torch.equal(s["plain"], torch.arange(3.0))
    assert type(s["frozen"]) is torch.nn.Parameter and not s["frozen"].requires_grad
    (s["leaf"] * 2).sum().backward()                   # the hook still fires
    assert m2.seen == [6.0] and torch.equal(s["leaf"].grad, torch.full((3,), 2.0))


def test_sparse_coo_tensors(program):
    i = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])
    v = torch.tensor([3.0, 4.0, 5.0, 1.0])
    raw = torch.sparse_coo_tensor(i, v, (2, 3))                      # not coalesced
    state = {"raw": raw, "coalesced": raw.coalesce(),
             "grad": torch.sparse_coo_tensor(i, v, (2, 3)).coalesce().requires_grad_()}
    s, _ = program.roundtrip(state)
    assert not s["raw"].is_coalesced() and torch.equal(s["raw"]._values(), v)
    assert s["coalesced"].is_coalesced()
    assert torch.equal(s["coalesced"].to_dense(), raw.to_dense())
    assert s["grad"].requires_grad and s["grad"].layout == torch.sparse_coo


def test_other_layouts_are_refused_naming_the_variable(program):
    csr = torch.eye(3).to_sparse_csr()
    with pytest.raises(Unsaveable) as e:
        program.write({"x": csr}, roots={"local 'adjacency'": csr})
    assert "local 'adjacency'" in str(e.value) and "sparse_csr" in str(e.value)


def test_live_graph_declines_the_loop_naming_the_variable(program):
    w = torch.ones(3, requires_grad=True)
    total = (w * w).sum()                           # could still be back-propagated
    with pytest.raises(DeclineLoop) as e:
        program.write({"x": [total]}, roots={"local 'total'": total})
    assert str(e.value).startswith("local 'total' (torch.Tensor): a tensor in a live autograd "
                                   "graph (grad_fn=SumBackward0)")
    sums = w + w                                     # saves no tensor: still live
    with pytest.raises(DeclineLoop):
        program.write({"x": sums}, roots={"local 'sums'": sums})


def test_a_view_of_a_leaf_keeps_its_gradient_path(program):
    w = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    first, second = w.chunk(2)
    state = {"w": w, "first": first, "col": w.t()[1]}
    s, _ = program.roundtrip(state)
    assert s["first"].grad_fn is not None and torch.equal(s["first"], first)
    assert torch.equal(s["col"], state["col"])
    (s["first"].sum() * 2 + s["col"].sum()).backward()
    assert torch.equal(s["w"].grad, torch.tensor([[2.0, 3.0, 2.0], [0.0, 1.0, 0.0]]))
    s["w"].data[0, 0] = 9                      # still a view of the restored leaf
    assert s["first"][0, 0] == 9


def test_consumed_graph_is_saved_as_a_leaf(program):
    w = torch.ones(3, requires_grad=True)
    h = torch.tanh(w * 2)
    h.sum().backward()                               # frees h's graph
    context = PickleContext()
    s, _ = program.roundtrip({"h": h}, context)
    assert s["h"].grad_fn is None and not s["h"].requires_grad
    assert torch.equal(s["h"], h.detach())
    assert len(context.cut) == 1 and context.cut[0] is h      # for the suspend message


def test_consumed_graph_deep_below_a_node_that_saved_nothing(program):
    rnn, lin = torch.nn.GRU(4, 4, batch_first=True), torch.nn.Linear(4, 3)
    y, h = rnn(torch.randn(2, 5, 4))
    out = lin(y)                                 # AddBackward0 <- view <- mm: saved below
    (out.sum() + h.sum()).backward()
    s, _ = program.roundtrip({"out": out, "h": h})
    assert torch.equal(s["out"], out.detach()) and torch.equal(s["h"], h.detach())
    w = torch.ones(3, requires_grad=True)
    live = torch.tanh(w) + 1                    # the same shape of graph, not consumed
    with pytest.raises(DeclineLoop, match="live autograd graph"):
        program.write({"live": live})


def test_inference_and_meta_tensors(program):
    with torch.inference_mode():
        inf = torch.arange(4.0)
    meta = torch.empty(5, 2, device="meta").t()
    s, _ = program.roundtrip({"inf": inf, "meta": meta})
    assert s["inf"].is_inference() and torch.equal(s["inf"], inf)
    assert s["meta"].is_meta and s["meta"].shape == (2, 5) and s["meta"].stride() == (1, 2)


def test_generators(program):
    g = torch.Generator().manual_seed(7)
    torch.manual_seed(11)
    torch.rand(3, generator=g)
    s, _ = program.roundtrip({"g": g, "default": torch.default_generator})
    assert s["default"] is torch.default_generator
    assert torch.equal(torch.rand(4, generator=s["g"]), torch.rand(4, generator=g))


# --- training state ---------------------------------------------------------------

TRAINING = """
    import torch
    calls = []
    def forward_hook(module, inputs, output):
        calls.append(("forward", type(module).__name__))
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 8)
            self.drop = torch.nn.Dropout(0.25)
            self.fc2 = torch.nn.Linear(8, 1)
            self.register_buffer("seen", torch.zeros(()))
        def forward(self, x):
            self.seen += len(x)
            return self.fc2(self.drop(torch.relu(self.fc1(x))))
    def build(kind):
        torch.manual_seed(0)
        net = Net()
        handle = net.fc1.register_forward_hook(forward_hook)
        net.fc2.register_forward_hook(lambda m, i, o: calls.append(("lambda", o.shape[0])))
        net.register_full_backward_hook(lambda m, gi, go: calls.append(("backward", len(go))))
        if kind == "adam":
            opt = torch.optim.Adam(net.parameters(), lr=0.01)
        elif kind == "adamw":
            opt = torch.optim.AdamW(net.parameters(), lr=0.01, weight_decay=0.1)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        step_lr = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"net": net, "opt": opt, "sched": sched, "step_lr": step_lr, "handle": handle}
    def train(s, steps):
        losses = []
        for i in range(steps):
            x = torch.randn(5, 4)
            loss = s["net"](x).pow(2).mean()
            s["opt"].zero_grad()
            loss.backward()
            s["opt"].step()
            s["sched"].step()
            s["step_lr"].step()
            losses.append(loss.item())
        return losses
"""


@pytest.mark.parametrize("kind", ["adam", "adamw", "sgd"])
def test_training_continues_bit_for_bit(program, kind):
    mod = program.module("trainer", TRAINING)
    s = mod.build(kind)
    mod.train(s, 3)
    saved_rng = torch.get_rng_state()
    restored, _ = program.roundtrip({"s": s, "rng": saved_rng})
    m2 = sys.modules["trainer"]
    r = restored["s"]
    assert r["opt"].param_groups[0]["params"][0] is r["net"].fc1.weight
    assert set(map(id, r["opt"].state)) == set(map(id, r["net"].parameters()))
    assert r["sched"].optimizer is r["opt"] and r["step_lr"].optimizer is r["opt"]
    del mod.calls[:], m2.calls[:]
    import warnings
    torch.set_rng_state(saved_rng)
    with warnings.catch_warnings(record=True) as uninterrupted:
        warnings.simplefilter("always")
        expected = mod.train(s, 4)
    torch.set_rng_state(restored["rng"])
    with warnings.catch_warnings(record=True) as resumed:
        warnings.simplefilter("always")
        got = m2.train(r, 4)
    assert got == expected
    # no warning of its own (e.g. "optimizer.step() overridden"): exactly those the
    # uninterrupted run gives (torch 2.14 warns of the full backward hook on a
    # module whose inputs need no gradient; 1.13 gives none)
    assert [(w.category, str(w.message)) for w in resumed] == \
        [(w.category, str(w.message)) for w in uninterrupted]
    for a, b in zip(s["net"].state_dict().values(), r["net"].state_dict().values()):
        assert raw_bytes(a) == raw_bytes(b)
    if hasattr(s["opt"], "_step_count"):     # torch 1.13: the schedulers' counter on the optimizer
        assert r["opt"]._step_count == s["opt"]._step_count == 7
    else:                                    # 2.x: their step() wrapper notes that it was called
        assert r["opt"]._opt_called and s["opt"]._opt_called
        assert getattr(r["opt"].step, "_wrapped_by_lr_sched", False)
    assert r["sched"]._step_count == s["sched"]._step_count == 8      # made, then 7 steps
    assert r["sched"].get_last_lr() == s["sched"].get_last_lr()
    assert [c for c in m2.calls] == [c for c in mod.calls]           # hooks fire
    assert ("backward", 1) in m2.calls and ("lambda", 5) in m2.calls
    r["handle"].remove()                                  # the user's handle still works
    assert not r["net"].fc1._forward_hooks and s["net"].fc1._forward_hooks


def test_grad_scaler(program):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # "CUDA is not available", 2.x's deprecation
        off = torch.cuda.amp.GradScaler()
    import importlib.util
    generic = importlib.util.find_spec("torch.amp.grad_scaler") is not None   # torch 2.x
    _refresh_per_optimizer_state = importlib.import_module(
        "torch.amp.grad_scaler" if generic else "torch.cuda.amp.grad_scaler")._refresh_per_optimizer_state
    on = torch.cuda.amp.GradScaler.__new__(torch.cuda.amp.GradScaler)
    if generic:
        on._device = "cuda"
    on.__dict__.update(            # as GradScaler(enabled=True) on a GPU, after scale()
        _enabled=True, _init_scale=2.0 ** 16, _scale=torch.tensor(1024.0),
        _growth_factor=2.0, _backoff_factor=0.5, _growth_interval=2000,
        _init_growth_tracker=0, _growth_tracker=torch.tensor(3, dtype=torch.int32),
        _per_optimizer_states=collections.defaultdict(_refresh_per_optimizer_state))
    on._per_optimizer_states[id(object())]["stage"] = "unscaled"    # mid-iteration
    s, _ = program.roundtrip({"off": off, "on": on})
    assert not s["off"].is_enabled()
    assert s["on"].is_enabled() and s["on"]._scale.item() == 1024.0
    assert s["on"]._growth_tracker.item() == 3 and not s["on"]._per_optimizer_states
    assert s["on"]._per_optimizer_states[1]["found_inf_per_device"] == {}


def test_entered_inference_mode_is_entered_again(program):
    ctx = torch.inference_mode()
    ctx.__enter__()
    try:
        info = program.write({"ctx": ctx})
    finally:
        ctx.__exit__(None, None, None)
    assert not torch.is_inference_mode_enabled()
    s = program.read(info)
    fresh = torch.inference_mode()
    fresh.__enter__()
    guard = torch_state.torch_api.inference_guard_name(vars(fresh))    # this torch's name for it
    fresh.__exit__(None, None, None)
    assert guard is not None
    assert set(vars(s["ctx"])) == set(vars(torch.inference_mode())) | {guard}   # entered here
    assert torch.is_inference_mode_enabled()
    s["ctx"].__exit__(None, None, None)
    assert not torch.is_inference_mode_enabled()


# --- process-wide state -----------------------------------------------------------

@pytest.fixture
def torch_flags():
    saved = torch_state.capture_process()
    yield
    torch_state.restore_process(saved)


def test_process_state_round_trips(torch_flags):
    torch.manual_seed(5)
    torch.set_default_dtype(torch.float64)
    threads = max(1, torch.get_num_threads() - 1) if torch.get_num_threads() > 1 else 2
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_grad_enabled(False)
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.benchmark = True
    torch.set_autocast_cpu_enabled(True)
    torch.set_autocast_cpu_dtype(torch.bfloat16)
    saved = torch_state.capture_process()
    expected = torch.rand(3)
    import pickle
    saved = pickle.loads(pickle.dumps(saved))          # what the checkpoint carries
    torch.manual_seed(99)
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1 if threads != 1 else 2)
    torch.use_deterministic_algorithms(False)
    torch.set_grad_enabled(True)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = False
    torch.set_autocast_cpu_enabled(False)
    torch_state.restore_process(saved)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_default_dtype() == torch.float64
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert not torch.is_grad_enabled()
    assert torch.get_float32_matmul_precision() == "medium"
    assert torch.backends.cudnn.benchmark
    assert torch.is_autocast_cpu_enabled() and torch.get_autocast_cpu_dtype() == torch.bfloat16
    assert saved["cuda_rng"] is None                    # CUDA never initialised here


def test_plugin_gives_nothing_without_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    assert torch_state.capture_process() is None
    from _portal.checkpoint.context import PickleContext
    assert torch_state.reducers(PickleContext()) == {} and torch_state.subclass_reducers(PickleContext()) == {}


# --- the CUDA path, on CPU ----------------------------------------------------------

class RecordingSource:
    """A stand-in for a device tensor: records every slice that is copied."""

    def __init__(self, data):
        self.data, self.slices = data, []

    def __getitem__(self, key):
        self.slices.append((key.start, key.stop))
        return self.data[key]


def test_device_copies_go_in_bounded_chunks():
    data = torch.randint(0, 256, (10 * 1000 + 7,), dtype=torch.uint8)
    src = RecordingSource(data)
    dst = torch.zeros_like(data)
    torch_state.copy_in_chunks(src, dst, chunk_bytes=1000)
    assert torch.equal(dst, data)
    assert all(stop - start <= 1000 for start, stop in src.slices)
    assert src.slices[0][0] == 0 and src.slices[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(src.slices, src.slices[1:]))  # no gap


def test_spill_goes_to_a_shared_file_mapping(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTAL_SPILL_DIR", str(tmp_path))
    t = torch.arange(3000, dtype=torch.int32)
    buf = torch_state._spill_device_storage(t.storage().untyped(), chunk_bytes=4096)
    assert bytes(buf.raw()) == raw_bytes(t)
    assert os.listdir(tmp_path) == []                   # the spill file is unlinked
    import mmap
    assert isinstance(buf.raw().obj, mmap.mmap)
    storage = torch_state._device_storage_from_host(buf.raw(), "cpu", 0, chunk_bytes=100)
    back = torch.empty(0, dtype=torch.int32).set_(
        torch.storage.TypedStorage(wrap_storage=storage, dtype=torch.int32))
    assert torch.equal(back, t)
    assert torch_state._spill_device_storage(torch.empty(0).storage().untyped()).raw().nbytes == 0


def test_device_map():
    assert torch_state.parse_device_map("0:1, 2:0") == {0: 1, 2: 0}
    assert torch_state.parse_device_map("") == {}
    assert torch_state._map_device(0, {"PORTAL_DEVICE_MAP": "0:1"}) == 1
    assert torch_state._map_device(3, {"PORTAL_DEVICE_MAP": "0:1"}) == 3
    with pytest.raises(ValueError, match="PORTAL_DEVICE_MAP: 'x1' is not FROM:TO"):
        torch_state.parse_device_map("x1")


def test_missing_device_is_named_with_the_fix():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the missing-device path needs a machine without one")
    with pytest.raises(RuntimeError, match=r"portal: cuda:0: .*portal resume JOB --device-map 0:0"):
        torch_state._device_storage_from_host(bytearray(8), "cuda", 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: CUDA tensors "
                    "cannot be tested on this machine (reviewed, see docs/torch.md)")
def test_cuda_tensors_round_trip(program):
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    s, blobs = program.roundtrip({"t": t, "v": t[::3]})
    assert s["t"].device == t.device and torch.equal(s["t"], t)
    assert s["v"].data_ptr() != t.data_ptr() and blobs == t.numel() * 4


def test_a_capture_keeps_no_storage_alive(program):
    import gc
    t = torch.ones(1000)
    context = PickleContext()
    program.write({"t": t}, context=context)
    del t
    gc.collect()
    # the pickling's table of storages holds none once its pickler is gone, even
    # while its context lives on: a program that goes on frees its tensors
    assert len(context.scratch[torch_state.__name__].storages) == 0


def test_inference_mode_without_its_context_object_is_held(torch_flags):
    with torch.inference_mode():
        saved = torch_state.capture_process()
    assert saved["inference"] and not torch.is_inference_mode_enabled()
    torch_state.restore_process(saved)
    try:
        assert torch.is_inference_mode_enabled() and len(torch_state._HELD_GUARDS) == 1
    finally:
        torch_state._HELD_GUARDS.pop()
    assert not torch.is_inference_mode_enabled()
