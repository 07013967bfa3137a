"""A user module beside the scripts of the corpus."""
import sys

VALUE = 42


def caller_name():
    return sys._getframe(1).f_globals["__name__"]
