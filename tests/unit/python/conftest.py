"""Shared fixtures of the Python unit tests.

The package under test is the staged one of the build tree (PYTHONPATH set by
CTest); run by hand with
    PYTHONPATH=build/lib/portal/python /usr/bin/python3 -m pytest tests/unit/python
"""
import sys

import pytest


# The interpreters the tests run on: Debian 12's 3.11 on the host, Debian 13's 3.13
# in its root (the bytecode layer's tables: _portal/bytecode/tables.py).
_TESTED = ((3, 11), (3, 13))


@pytest.fixture(autouse=True, scope="session")
def _only_debian_python():
    assert sys.version_info[:2] in _TESTED, "run the tests with Debian's /usr/bin/python3"


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
