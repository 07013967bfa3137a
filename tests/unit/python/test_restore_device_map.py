"""The device map of a resume outlives the job's environment being put back.

`portal resume JOB --device-map 0:1` hands PORTAL_DEVICE_MAP to the resuming
process.  Restore puts the job's own environment back (which has no such
variable) before the plug-ins restore process state, the CUDA generators among
them: the map must still be the resuming process's there, as it was for the
tensors unpickled before.  CPU-only: the mapping itself is asked of torch_state,
which the CUDA generator restore calls (torch_state.restore_process).
"""
import os
import sys
import types

from _portal.restore import resume as restore
from _portal.torch import objects as torch_state


def _process(environ):
    return types.SimpleNamespace(
        cwd=os.getcwd(), environ=environ, argv=list(sys.argv),
        orig_argv=list(sys.orig_argv), path=list(sys.path), recursion_limit=None,
        random_state=None, numpy_state=None, plugins=None)


def test_the_resumes_device_map_is_kept_after_the_jobs_environment_is_back():
    saved_environ, saved_pin = dict(os.environ), dict(torch_state._PINNED_DEVICE_MAP)
    try:
        os.environ["PORTAL_DEVICE_MAP"] = "0:1,1:0"
        assert torch_state._map_device(0) == 1        # what the tensors are mapped by
        job_environ = {k: v for k, v in saved_environ.items() if k != "PORTAL_DEVICE_MAP"}
        restore._apply_process_state(_process(job_environ))
        assert "PORTAL_DEVICE_MAP" not in os.environ  # the job's environment, exactly
        assert torch_state._map_device(0) == 1        # and the generators still mapped
        assert torch_state._map_device(1) == 0
        assert torch_state._map_device(2) == 2
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        torch_state._PINNED_DEVICE_MAP.clear()
        torch_state._PINNED_DEVICE_MAP.update(saved_pin)


def test_no_device_map_maps_every_device_to_itself_after_restore():
    saved_environ, saved_pin = dict(os.environ), dict(torch_state._PINNED_DEVICE_MAP)
    try:
        os.environ.pop("PORTAL_DEVICE_MAP", None)
        # the job itself ran with a map in its environment: not the resume's
        restore._apply_process_state(_process(dict(saved_environ, PORTAL_DEVICE_MAP="0:3")))
        assert os.environ["PORTAL_DEVICE_MAP"] == "0:3"
        assert torch_state._map_device(0) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        torch_state._PINNED_DEVICE_MAP.clear()
        torch_state._PINNED_DEVICE_MAP.update(saved_pin)
