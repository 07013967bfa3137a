"""What a suspend message says about a comprehension the error came from.

In CPython 3.11 a list, set or dict comprehension and a generator expression
are functions of their own (`<listcomp>` ...), called from the expression that
contains them.  Their loop is not a statement: the instrumenter, which wraps
loop bodies in `try` at the source level (instrument.py), has no body to wrap,
and a `try` cannot be written inside an expression.  Resuming at the item of a
comprehension would need its code object rewritten at the bytecode level (an
exception-table entry over the loop body and a handler calling the rescue,
plus a capture of its frame: its hidden `.0` iterator and the partial result on
its stack) — zero cost at run time, as exception tables are, but not done.  So
an error inside one is rescued at the loop statement around it, which runs its
iteration again from the start, the comprehension with it; passed_over() says
so in the suspend message.

From CPython 3.12 on (PEP 709) list, set and dict comprehensions are inlined: no
frame of their own, their loop runs in the enclosing function's.  There the
comprehension is found from the instruction the error passed through in that
frame: its source position (co_positions) lies inside a ListComp, SetComp or
DictComp of the file's syntax tree.  Generator expressions keep their frame.
"""
# At the top, never in a function: start-up forgets Portal's imports (boot.py), and
# an `import ast` while the program's sys.path holds its working directory (the
# instrumentation of a module it imports) would run a planted ast.py there.
import ast        # instrument.py has imported it already: no start-up cost
import linecache

from _portal.bytecode.decode import CODE_UNIT   # co_positions has one entry per unit
from _portal.rescue import tracebacks

KINDS = {"<listcomp>": "a list comprehension", "<setcomp>": "a set comprehension",
         "<dictcomp>": "a dict comprehension", "<genexpr>": "a generator expression"}


# The syntax of the comprehensions CPython 3.12+ inlines, and what the message calls them.
INLINED_KINDS = {"ListComp": "a list comprehension", "SetComp": "a set comprehension",
                 "DictComp": "a dict comprehension"}


def passed_over(exc, loop_frame, is_user_file):
    """The message line for the innermost comprehension of the user's code that
    the error passed through inside the loop, or None."""
    tb = tracebacks.loop_entry(exc, loop_frame)
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            if code.co_name in KINDS:
                found = (KINDS[code.co_name], code, tb.tb_lineno)
            else:
                kind = inlined_at(code, tb.tb_lasti)
                if kind is not None:
                    found = (kind, code, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    kind, code, line = found
    return (f"the error came from inside {kind} at {code.co_filename}:{line}, which "
            f"Portal cannot resume at its item (its loop is inside an expression, which cannot be "
            f"wrapped): its partial result is dropped and it runs again whole, with the loop's iteration")


def inlined_at(code, lasti):
    """What the innermost list, set or dict comprehension of the source around the
    instruction at byte offset `lasti` of `code` is called, or None: for the
    comprehensions CPython 3.12+ inlines into the enclosing code (on 3.11 the
    instruction there is the call of the comprehension's own function, whose
    frame passed_over() finds first by name)."""
    if lasti is None or lasti < 0:
        return None
    positions = list(code.co_positions())
    index = lasti // CODE_UNIT
    if index >= len(positions):
        return None
    line, end_line, col, end_col = positions[index]
    if None in (line, end_line, col, end_col):
        return None
    kind = None
    for node in _comprehensions(code.co_filename):
        name, (first, last) = node
        if first <= (line, col) and (end_line, end_col) <= last:
            kind = INLINED_KINDS[name]     # _comprehensions lists outer ones first
    return kind


_TREES = {}    # filename -> [(node type name, ((line, col), (end line, end col)))]


def _comprehensions(filename):
    """The list, set and dict comprehensions of the file's source, outer before inner."""
    if filename not in _TREES:
        found = []
        try:
            tree = ast.parse("".join(linecache.getlines(filename)), filename)
        except (SyntaxError, ValueError):
            tree = None
        if tree is not None:
            for node in ast.walk(tree):    # breadth first: outer comprehensions first
                name = type(node).__name__
                if name in INLINED_KINDS:
                    found.append((name, ((node.lineno, node.col_offset),
                                         (node.end_lineno, node.end_col_offset))))
        _TREES[filename] = found
    return _TREES[filename]


# --- instrument.py: loops whose comprehensions take from a loader ---------------------------

_SCOPES = ("FunctionDef", "AsyncFunctionDef", "ClassDef", "Lambda")
_COMPREHENSIONS = ("ListComp", "SetComp", "DictComp", "GeneratorExp")
# Calls that hand on the iterable they are given (`enumerate(loader)`, `tqdm(val_loader)`).
_PASSING = frozenset({"enumerate", "tqdm", "zip", "islice", "iter", "list", "tuple", "sorted", "reversed"})


def _loader_like(node, ast) -> bool:
    """Is the expression a name of a data loader (`val_loader`, `self.test_loader`,
    `dl`, `train_dl`), or a call that passes one on?"""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in _PASSING and any(_loader_like(arg, ast) for arg in node.args)
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    if not isinstance(name, str):
        return False
    name = name.lower()
    return "loader" in name or name == "dl" or name.endswith("_dl")


def iterates_loader(stmts) -> bool:
    """Whether a comprehension or generator expression of the statements (not of the
    functions they define) iterates a data loader (by its name: _loader_like) or
    calls next() or iter(): each makes or advances a loader's iterator, which draws
    from torch's default generator (the DataLoader's seed, a shuffled sampler's
    permutation) or moves the iterator's count.  instrument.py marks such a loop's
    iterations, so that an error inside the comprehension is rolled back to the
    iteration's start (iteration.py): the generators and the loaders' counts."""
    todo = list(stmts)
    while todo:
        node = todo.pop()
        kind = type(node).__name__
        if kind in _SCOPES:
            continue
        if kind in _COMPREHENSIONS:
            for gen in node.generators:
                if _loader_like(gen.iter, ast):
                    return True
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) \
                        and inner.func.id in ("next", "iter"):
                    return True
        todo.extend(ast.iter_child_nodes(node))
    return False
