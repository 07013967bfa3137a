"""Warnings as python shows them by default: UserWarning at module level and in a
function, DeprecationWarning triggered in __main__ (shown) and in another module
(hidden), and stacklevel=2 at module level (attributed to `sys`, since no frame
is above the script's)."""
import sys
import warnings

import warn_helper

warnings.warn("module-level user warning")


def helper():
    warnings.warn("warning from a function", UserWarning)


helper()
warnings.warn("deprecated in __main__", DeprecationWarning)
warn_helper.deprecated_elsewhere()
warn_helper.deprecated_for_caller()
warnings.warn("attributed to the caller of the script", stacklevel=2)
warnings.warn("attributed to the caller of the script", DeprecationWarning, stacklevel=2)
print("filters", [(f[0], f[2].__name__, getattr(f[3], "pattern", f[3])) for f in warnings.filters][:6])
print("done", file=sys.stderr)
