"""Shared fixtures of the Python unit tests.

The package under test is the staged one of the build tree (PYTHONPATH set by
CTest); run by hand with
    PYTHONPATH=build/lib/portal/python /usr/bin/python3 -m pytest tests/unit/python
"""
import sys

import pytest


@pytest.fixture(autouse=True, scope="session")
def _only_debian_python():
    assert sys.version_info[:2] == (3, 11), "run the tests with /usr/bin/python3"
