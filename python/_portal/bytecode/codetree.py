"""A code object and the code objects nested in its constants (functions, classes,
comprehensions, lambdas), rewritten together: the one walk the post-compile passes
(reraise.keep_lines, generator_close.keep_close) share."""
import types
from typing import Callable


def rewrite_tree(code: types.CodeType, rewrite: Callable[[types.CodeType], types.CodeType]) -> types.CodeType:
    """`code` with `rewrite` applied to every code object in its constants
    (recursively, the innermost first) and then to itself; the same object where
    nothing changed."""
    consts = code.co_consts
    new_consts = tuple(rewrite_tree(c, rewrite) if isinstance(c, types.CodeType) else c for c in consts)
    if any(a is not b for a, b in zip(consts, new_consts)):
        code = code.replace(co_consts=new_consts)
    return rewrite(code)
