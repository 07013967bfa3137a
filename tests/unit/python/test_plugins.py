"""_portal.state.plugins: what the start-up takes from the plug-ins."""
import os
import subprocess
import sys


def test_import_patches_imports_nothing_but_portal_s_own_modules():
    """import_patches() runs before the program; boot forgets what start-up imported,
    and a library imported twice can have two versions of its types (mmap.mmap: an
    np.memmap then no longer looks mapped, and is copied into the checkpoint)."""
    code = ("import sys; before = set(sys.modules); from _portal.state import plugins; "
            "patches = plugins.import_patches(); "
            "print(sorted(set(sys.modules) - before)); print(sorted(patches))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), check=True).stdout.splitlines()
    new_modules = eval(out[0])
    assert new_modules and all(m == "_portal" or m.startswith("_portal.") for m in new_modules), new_modules
    assert eval(out[1]) == ["numpy.random", "random", "torch", "torch.autograd.variable",
                            "torch.nn.modules.batchnorm", "torch.nn.modules.module",
                            "torch.optim.lr_scheduler", "torch.optim.optimizer", "torch.random",
                            "torch.utils.data.dataloader"]
