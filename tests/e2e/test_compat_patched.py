"""Portal's patches of library functions (a DataLoader iterator's __next__, an LR
scheduler's step, a BatchNorm's __init__, an optimizer's __init__, zero_grad,
torch.manual_seed: dataloader.py, irreversible.py, grads.py, rng_check.py) leave
no frame of Portal's in a traceback: an error raised under them prints python's
own text, compared whole with python's run of the same program."""
import pytest

from conftest import assert_same, run_both

pytest.importorskip("torch", reason="the patched functions are torch's")

CASES = [
    (["dataset_error.py", "0"], b"ValueError: bad item 5"),
    # torch re-raises the worker's error with the worker's traceback as text
    (["dataset_error.py", "1"], b"Caught ValueError in DataLoader worker process 0"),
    (["scheduler_error.py", "scheduler"], b"ValueError: no factor for epoch 2"),
    # torch's own words differ by version (1.13: "empty() received an invalid ...",
    # 2.14: "empty(): argument 'size' ..."): the type is the case's
    (["scheduler_error.py", "batchnorm"], b"TypeError: empty()"),
    # wrapped to note gradients (grads.py) and random states (rng_check.py)
    (["optimizer_error.py", "optimizer"], b"ValueError: optimizer got an empty parameter list"),
    (["optimizer_error.py", "zero_grad"], b"TypeError: "),
    (["optimizer_error.py", "seed"], b"Error: "),
]


@pytest.mark.parametrize("args, expect", CASES, ids=["dataset", "dataset_worker", "scheduler",
                                                     "batchnorm", "optimizer", "zero_grad", "seed"])
def test_traceback_is_pythons(portal_run, workdir, args, expect):
    result = run_both(portal_run, workdir, args)
    if args == ["dataset_error.py", "1"] and expect not in result.python.stderr:
        last = result.python.stderr.decode(errors="replace").strip().splitlines()[-1:]
        pytest.skip(f"python's own run of this case does not reach the worker's error here: {last}")
    assert result.python.returncode == 1 and expect in result.python.stderr, result.python.stderr
    assert_same(result.python, result.portal)


def test_the_patched_functions_are_portals(portal_run, workdir):
    """The comparisons above show something only while the patches are in place."""
    import subprocess
    from conftest import base_env
    code = ("import torch.utils.data.dataloader as d, torch.optim.lr_scheduler as s, "
            "torch.nn.modules.batchnorm as b\n"
            "print(d._BaseDataLoaderIter.__next__.__module__, s.LambdaLR.step.__module__, "
            "b._NormBase.__init__.__module__)")
    run = subprocess.run([portal_run, "-c", code], cwd=workdir, capture_output=True, env=base_env(),
                         timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.split() == [b"_portal.torch.dataloader", b"_portal.fidelity.irreversible", b"_portal.fidelity.irreversible"]
    code = ("import torch\n"
            "print(torch.optim.Optimizer.__init__.__module__, torch.nn.Module.zero_grad.__module__, "
            "hasattr(torch.manual_seed, '__wrapped__'))")
    run = subprocess.run([portal_run, "-c", code], cwd=workdir, capture_output=True, env=base_env(),
                         timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.split() == [b"_portal.fidelity.grads", b"_portal.fidelity.grads", b"True"]
