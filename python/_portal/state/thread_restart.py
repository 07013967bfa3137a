"""Would a thread, run again from its start, be where it waits now?  (threading_state.py)

A worker thread waiting on its queue cannot be saved, but it can be started again
when nothing it did on its way to that wait needs doing again or would be lost.
The thread's own frames (those of its function, its target or its class's `run`,
down to the frame that called into threading/queue, innermost first) are read from
their source.  Each frame must be at a call reached from its function's start by a
*path of no effect*:

  * the call's statement is `CALL`, `NAME = CALL`, `obj.attr = CALL`, `return CALL`
    (or `A if TEST else B` of calls), or the test of the `while`/`if` it is in; the
    arguments of its calls are plain expressions (below);
  * on the way to it from the function's start there are only `while` loops, `if`
    and `try` statements (in their bodies: not waiting in a handler, an `else` or a
    `finally`), with plain tests, and before it in each block only assignments of
    plain expressions to local names (and `pass`, a docstring).  No `for` (its
    iterator's place would be lost), no `with` (a lock held there would be) but
    `with COND:` on the very Condition waited on, or its lock, as in `with
    self._cond: while not self._items: self._cond.wait()`: its lock is let go
    while the thread waits, and a restart takes it again;
  * plain expressions: names, constants, attribute reads, subscripts, operators,
    comparisons, conditional expressions, tuples and lists of those, and calls of
    the clocks (`time.time()`, `monotonic()`, `perf_counter()` and their `_ns`) or
    of `is_set()`, `empty()`, `qsize()`, `full()`, `is_alive()`, `len`, `min`,
    `max`, `abs`: so running that path again changes nothing but the frame's own
    locals;
  * every local that may be read after the call (codemap's liveness), but the
    function's arguments, is assigned on that path inside the innermost loop
    around the call (so every iteration computes it before it waits: `now =
    time.time()`, `data = None`), or in the function's body when no loop is around
    it.  A local the loop carries from one iteration to the next (a batch being
    gathered, a count) would be lost: refused.

A restart then runs the same path again and waits at the same call, with the
locals computed again from the objects as they are saved and from the clock (a
flush timer counts from the resume).  tensorboard's `_AsyncWriterThread` (run()
calls `_run()` inside a `try`; `_run()` computes its wait from the next flush time,
then `data = None`, then `queue.get(True, wait)` in a `try`) has that shape.
"""
import ast
import inspect
import textwrap

#: attributes whose calls are plain: reading a clock or asking a state
_PLAIN_METHODS = frozenset({"time", "monotonic", "perf_counter", "time_ns", "monotonic_ns",
                            "perf_counter_ns", "is_set", "empty", "qsize", "full", "is_alive"})
_PLAIN_FUNCTIONS = frozenset({"len", "min", "max", "abs", "time", "monotonic", "perf_counter",
                              "time_ns", "monotonic_ns", "perf_counter_ns"})

_TREES = {}     # code -> (FunctionDef, line offset) or why not (str)
_PATHS = {}     # (code, line) -> (locals assigned on the path, the innermost loop's) or why not


def _tree(code):
    if code not in _TREES:
        try:
            lines, first = inspect.getsourcelines(code)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError, IndentationError):
            _TREES[code] = "its function's source cannot be read"
        else:
            node = tree.body[0] if tree.body else None
            if not isinstance(node, ast.FunctionDef) or node.name != code.co_name:
                _TREES[code] = "its function's source cannot be read as a def"
            else:
                _TREES[code] = (node, first - 1)
    return _TREES[code]


def _plain(node):
    """An expression whose evaluation changes nothing (the module's docstring)."""
    if node is None or isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):
        return _plain(node.value)
    if isinstance(node, ast.Subscript):
        return _plain(node.value) and _plain(node.slice)
    if isinstance(node, ast.Slice):
        return _plain(node.lower) and _plain(node.upper) and _plain(node.step)
    if isinstance(node, ast.BinOp):
        return _plain(node.left) and _plain(node.right)
    if isinstance(node, ast.UnaryOp):
        return _plain(node.operand)
    if isinstance(node, ast.BoolOp):
        return all(_plain(v) for v in node.values)
    if isinstance(node, ast.Compare):
        return _plain(node.left) and all(_plain(c) for c in node.comparators)
    if isinstance(node, ast.IfExp):
        return _plain(node.test) and _plain(node.body) and _plain(node.orelse)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_plain(e) for e in node.elts)
    if isinstance(node, ast.Call):
        f = node.func
        named = (isinstance(f, ast.Name) and f.id in _PLAIN_FUNCTIONS) or \
                (isinstance(f, ast.Attribute) and f.attr in _PLAIN_METHODS and _plain(f.value))
        return named and all(_plain(a) for a in node.args) and \
            all(_plain(k.value) for k in node.keywords)
    return False


def _waiting_expression(node):
    """The expression the thread waits in: one call of a name or of its attributes
    with plain arguments, maybe chosen by a conditional, maybe in a plain test (`not
    stop.wait(0.1)`); never two such calls on one way through it (the first would
    run again)."""
    calls = _calls(node)
    return calls is not None and calls <= 1


def _calls(node):
    """How many calls that are not plain one evaluation of `node` makes at most,
    or None if it is not made of plain parts and such calls."""
    if _plain(node):
        return 0
    if isinstance(node, ast.Call):
        plain_arguments = all(_plain(a) for a in node.args) and \
            all(_plain(k.value) for k in node.keywords)
        return 1 if _attribute_chain(node.func) and plain_arguments else None
    if isinstance(node, ast.IfExp):
        if not _plain(node.test):
            return None
        body, orelse = _calls(node.body), _calls(node.orelse)
        return None if body is None or orelse is None else max(body, orelse)
    parts = (node.operand,) if isinstance(node, ast.UnaryOp) else \
        tuple(node.values) if isinstance(node, ast.BoolOp) else \
        (node.left, *node.comparators) if isinstance(node, ast.Compare) else None
    if parts is None:
        return None
    counts = [_calls(p) for p in parts]
    return None if None in counts else sum(counts)


def _attribute_chain(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _assigned(stmt):
    """The local names a plain statement assigns, or None if it is not plain."""
    if isinstance(stmt, ast.Pass):
        return set()
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return set()
    if isinstance(stmt, ast.Assign) and _plain(stmt.value):
        names = set()
        for target in stmt.targets:
            elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            for t in elts:
                if not isinstance(t, ast.Name):
                    return None
                names.add(t.id)
        return names
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and _plain(stmt.value):
        return {stmt.target.id} if stmt.value is not None else set()
    return None


def _within(node, line):
    return node.lineno <= line <= (node.end_lineno or node.lineno)


def _entered(name, line):
    return f"{name}() waits inside a with statement (line {line}): what it entered would be lost"


def _chain(node):
    """`self._cond` as ("self", "_cond")."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return (node.id, *reversed(names))


def _resolve(frame, chain):
    from _portal.bytecode import frame_locals
    missing = object()
    value = frame_locals.value(frame, chain[0], missing)
    if value is missing:
        value = frame.f_globals.get(chain[0], missing)
    for attr in chain[1:]:
        if value is missing:
            break
        try:
            value = getattr(value, attr)
        except Exception:
            value = missing
    return None if value is missing else value


def _line_of(code, offset):
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None


def _path(function, line, offset, name):
    """(names assigned on the path inside the innermost loop around the wait, or in
    the body when none is; the (line, name chain) of each `with` on it) or why not
    (str)."""
    block = function.body
    assigned, entered = set(), []
    while True:
        current = next((s for s in block if _within(s, line - offset)), None)
        if current is None:
            return f"{name}() waits outside the statements of its body"
        for stmt in block[:block.index(current)]:
            names = _assigned(stmt)
            if names is None:
                return (f"{name}() runs line {stmt.lineno + offset} before it waits, "
                        f"which a restart would run again")
            assigned |= names
        at = line - offset
        if isinstance(current, ast.While):
            if _within(current.test, at):   # at the loop's head: nothing computed anew
                return (set(), entered) if _waiting_expression(current.test) else \
                    f"{name}() waits in its loop's condition, which does more than wait"
            if not _plain(current.test):
                return f"{name}()'s loop condition at line {current.lineno + offset} does more than read"
            if current.orelse and not any(_within(s, at) for s in current.body):
                return f"{name}() waits in a loop's else block"
            block, assigned = current.body, set()   # each iteration computes them anew
        elif isinstance(current, ast.If):
            if _within(current.test, at):
                return (assigned, entered) if _waiting_expression(current.test) else \
                    f"{name}() waits in an if's condition, which does more than wait"
            if not _plain(current.test):
                return f"{name}()'s condition at line {current.lineno + offset} does more than read"
            block = current.body if any(_within(s, at) for s in current.body) else current.orelse
        elif isinstance(current, ast.Try) or type(current).__name__ == "TryStar":
            if not any(_within(s, at) for s in current.body):
                return f"{name}() waits in a handler, else or finally block (line {line})"
            block = current.body
        elif isinstance(current, ast.With) and len(current.items) == 1 \
                and current.items[0].optional_vars is None \
                and _attribute_chain(current.items[0].context_expr):
            # `with self._cond:` around the wait: sound only if it is the Condition
            # waited on (its lock is let go while it waits), checked on the frame
            entered.append((current.lineno + offset, _chain(current.items[0].context_expr)))
            block = current.body
        elif isinstance(current, (ast.With, ast.AsyncWith)):
            return _entered(name, current.lineno + offset)
        elif isinstance(current, (ast.For, ast.AsyncFor)):
            return (f"{name}() waits inside a for loop (line {current.lineno + offset}): "
                    f"its place in the loop would be lost")
        elif isinstance(current, ast.Expr) or isinstance(current, ast.Return):
            if current.value is None or not _waiting_expression(current.value):
                return f"{name}() waits in line {line}, which does more than wait"
            return assigned, entered
        elif isinstance(current, ast.Assign):
            targets_ok = all(isinstance(t, (ast.Name, ast.Attribute)) and
                             (isinstance(t, ast.Name) or _plain(t.value)) for t in current.targets)
            if not targets_ok or not _waiting_expression(current.value):
                return f"{name}() waits in line {line}, which does more than wait"
            return assigned, entered
        else:
            return f"{name}() waits in line {line}, which does more than wait"


def why_not_restartable(frame, condition):
    """Why running this frame's function again from its start would not bring it
    back to the call it is in (str), or None; `condition`: the Condition the
    thread waits on."""
    from _portal.bytecode import codemap
    code = frame.f_code
    name = code.co_name
    tree = _tree(code)
    if isinstance(tree, str):
        return tree
    function, offset = tree
    line = frame.f_lineno
    key = (code, line)
    if key not in _PATHS:
        _PATHS[key] = _path(function, line, offset, name)
    found = _PATHS[key]
    if isinstance(found, str):
        return found
    found, entered = found
    for at_line, chain in entered:
        context = _resolve(frame, chain)
        if context is None or (context is not condition
                               and context is not getattr(condition, "_lock", None)):
            return _entered(name, at_line)
    arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount
                                     + bool(code.co_flags & inspect.CO_VARARGS)
                                     + bool(code.co_flags & inspect.CO_VARKEYWORDS)])
    # f_lasti may point into the caches of the CALL the thread waits in
    at = max(i.offset for i in codemap.instructions(code) if i.offset <= frame.f_lasti)
    # a Condition's __exit__ never swallows an error: what follows its block is
    # not reached from the wait that way
    lines = {at_line for at_line, _ in entered}
    never_suppress = [w.before_with for w in codemap.with_sites(code)
                      if _line_of(code, w.before_with) in lines] if lines else ()
    live = codemap.live_locals_at(code, at, never_suppress) - arguments - found
    if live:
        return f"its loop keeps {', '.join(sorted(live))} in locals"
    return None
