import warnings


def deprecated_elsewhere():
    warnings.warn("deprecated inside warn_helper (hidden by default)", DeprecationWarning)


def deprecated_for_caller():
    warnings.warn("deprecated, blamed on __main__ (shown)", DeprecationWarning, stacklevel=2)
