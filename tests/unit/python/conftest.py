"""Shared fixtures of the Python unit tests.

The package under test is the staged one of the build tree (PYTHONPATH set by
CTest); run by hand with
    PYTHONPATH=build/lib/portal/python /usr/bin/python3 -m pytest tests/unit/python
"""
import sys

import pytest


# The CPython versions Portal is built for (PORTAL_SUPPORTED_PYTHONS, cmake/PortalPython.cmake).
SUPPORTED_PYTHONS = ((3, 11), (3, 12), (3, 13), (3, 14))


@pytest.fixture(autouse=True, scope="session")
def _only_debian_python():
    assert sys.version_info[:2] in SUPPORTED_PYTHONS, \
        "run the tests with Debian's /usr/bin/python3 (3.11; 3.13 in a Debian 13 root; 3.14 in a Debian testing root; 3.12 built from source)"


@pytest.fixture(autouse=True, scope="session")
def _private_portal_home(tmp_path_factory):
    """Checkpoints are signed with the key in $PORTAL_HOME (signing.py): the tests,
    and the writers they start, use a key of their own, never the user's."""
    import os
    saved = os.environ.get("PORTAL_HOME")
    os.environ["PORTAL_HOME"] = str(tmp_path_factory.mktemp("portal-home"))
    yield
    if saved is None:
        os.environ.pop("PORTAL_HOME", None)
    else:
        os.environ["PORTAL_HOME"] = saved
