"""Loop instrumentation of the user's own code (docs/architecture.md, "How a suspension and a resume work").

Every ``for``/``while``/``async for`` loop body of a module is rewritten, at the AST
level, as::

    for x in it:                      for x in it:
        BODY              ->              try:
    else:                                     BODY
        ELSE                              except Exception:
                                              if __portal_rescue__(LOOP_LINE):
                                                  __portal_rescue__
                                                  continue
                                              raise
                                      else:
                                          ELSE

(the rescue returns True only when it skipped the item: --policy oom.action=skip;
the bare name is room for reraise.py, never executed as a load once patched)

A ``while`` statement is wrapped whole instead (its else clause included)::

    while cond:                       try:
        BODY              ->              while cond:
                                              BODY
                                      except Exception:
                                          __portal_rescue__(LOOP_LINE, BODY_SPAN)
                                          raise

so that an iteration runs exactly the instructions of the plain loop (a try inside
the body puts its handler between the body and the loop's bottom test, and every
iteration paid a ``JUMP_FORWARD`` over it).  The try takes the while statement's
location (no NOP, no line event of its own).  ``BODY_SPAN`` is the body's source
span (line, col, end_line, end_col): the handler also sees errors of the condition
and of the else clause, and the rescue takes only those whose traceback entry in
the loop's frame (tb_lasti) is an instruction of the body (codemap.in_body); the
others go on to the next loop out.  The resume point is still the body's first
instruction, where the loop jumps back to, at the handler's stack depth (a while
loop pushes nothing).

``LOOP_LINE`` is the loop statement's line number: the rescue entry point (a
builtin installed by the runtime) finds the loop by it.  ``except Exception`` (not
``BaseException``) lets ``GeneratorExit``, ``KeyboardInterrupt`` and ``SystemExit``
pass untouched, and the exception is fetched in C so no name is bound.

Locations, measured on CPython 3.11.2 (dis, and settrace event streams of plain and
instrumented runs compared in tests/unit/python/test_instrument.py):

* the ``try`` takes the location of the first statement of the body: the compiler
  then emits no NOP and no line event for it, and a ``for`` loop runs exactly the
  same instructions per iteration as before (a ``while`` loop, wrapped whole, too);
* every node of the handler has no location (lineno = end_lineno = col_offset =
  end_col_offset = -1, which the AST validator accepts): its instructions carry no
  line number, so a traced run sees no line event from them, even for exceptions
  that do not match (SystemExit, GeneratorExit); the bare ``raise`` re-raises
  without a new traceback entry or ``exception`` event: tracebacks, ``tb_lineno``
  and the line/call/exception event stream are those of the plain run.  Any real
  line number (the loop's, line 0, ...) adds a ``line`` event when an exception
  leaves the body;
* when an exception leaves a frame through a loop handler, the frame would end on
  the line-less re-raise (``frame.f_lineno`` None in the ``return`` event and on the
  dead frame): reraise.py rewrites the compiled handler to re-raise from the
  raising instruction, as a ``with`` statement's exit does, so the frame ends
  where the plain run's does;
* the rescue and iteration builtins are called unseen by tracers and profilers
  (runtime.py installs them as ``_toplevel.Untraced``).  What is left: with
  ``f_trace_opcodes`` set, the handler's instructions give ``opcode`` events.

The wrap doubles CPython's static block nesting (``try`` inside the loop, or around
a while loop, and the handler blocks, limit 20 per code object on 3.11, 21 on 3.13): loops whose wrap would not fit are left
unwrapped, innermost first, so any program that compiles still compiles.
"""
import ast

from _portal import INSTRUMENT_VERSION, ITERATION_NAME, RESCUE_NAME   # the builtins the code it writes calls
from _portal.fidelity import comprehensions
from _portal.run import generator_close, reraise, rng_names
from _portal.bytecode.tables import T as _BYTECODE

# Part of the instrumented-bytecode cache key: bump on any change of the output.
VERSION = INSTRUMENT_VERSION

FAKE_OOM_NAME = "__portal_fake_oom__"
CATCH_NAME = "Exception"

# CPython's CO_MAXBLOCKS: at most this many frame blocks per code object (3.11: 20,
# 3.13: 21; the bytecode layer's per-version table).
MAX_BLOCKS = _BYTECODE.MAX_BLOCKS
# A generator's or coroutine's body starts this many blocks deep (3.13: 1, its
# implicit StopIteration handler; 3.11: 0).
GENERATOR_BLOCKS = _BYTECODE.GENERATOR_BLOCKS

_NO_LOC = dict(lineno=-1, col_offset=-1, end_lineno=-1, end_col_offset=-1)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_TRY_STAR = getattr(ast, "TryStar", ())


# --- static block depth (what CPython's compiler pushes on its fblock stack) ----------
#
# Measured by nesting each construct under for-loops until "too many statically nested
# blocks": a loop body is 1 block deeper than the loop (its else: 0); a with-statement
# 1 per item; try/except: body +1, handler bodies +2 (the handler block and its
# clean-up); try/finally: body +1 and finally body +1, around the try/except part;
# try/except* like try/except; if/match: 0.  Functions and classes start a fresh count.
# tests/unit/python/test_instrument.py checks the model against compile().

def _need_list(stmts, memo):
    """Deepest block nesting pushed inside a statement list, relative to it."""
    need = 0
    for s in stmts:
        n = memo.get(id(s))
        if n is None:
            n = memo[id(s)] = _need_stmt(s, memo)
        if n > need:
            need = n
    return need


def _need_stmt(s, memo):
    if isinstance(s, _LOOPS):
        return max(1 + _need_list(s.body, memo), _need_list(s.orelse, memo))
    if isinstance(s, (ast.With, ast.AsyncWith)):
        return len(s.items) + _need_list(s.body, memo)
    if isinstance(s, ast.Try) or (_TRY_STAR and isinstance(s, _TRY_STAR)):
        inner = 1 + _need_list(s.body, memo)
        if s.handlers:
            hand = max(_need_list(h.body, memo) for h in s.handlers)
            inner = max(inner, 2 + hand, _need_list(s.orelse, memo))
        if s.finalbody:
            if s.handlers:
                inner += 1
            inner = max(inner, 1 + _need_list(s.finalbody, memo))
        return inner
    if isinstance(s, ast.If):
        return max(_need_list(s.body, memo), _need_list(s.orelse, memo))
    if isinstance(s, ast.Match):
        return max((_need_list(c.body, memo) for c in s.cases), default=0)
    return 0        # simple statements; def/class bodies count from zero


# --- the rewrite -------------------------------------------------------------------------

def _walk(node):
    """ast.walk(node): every node under `node`, breadth first, in ast.walk's order,
    without the import of collections that CPython 3.13's ast.walk makes at each
    call: this runs while the program runs (a user module imported late, `-m`),
    where that import would put collections back into the program's sys.modules
    after start-up forgot it."""
    todo = [node]
    for node in todo:          # a list grown while iterated: first in, first out
        todo.extend(ast.iter_child_nodes(node))
        yield node


def _copy_loc(node, src):
    node.lineno = src.lineno
    node.col_offset = src.col_offset
    node.end_lineno = src.end_lineno
    node.end_col_offset = src.end_col_offset
    return node


def _no_loc(node):
    for n in _walk(node):
        if isinstance(n, (ast.stmt, ast.expr, ast.excepthandler)):
            n.__dict__.update(_NO_LOC)
    return node


def _handler(loop_line, body_span=None):
    """A for loop's handler: `if __portal_rescue__(LINE): __portal_rescue__; continue`
    then `raise` (the rescue returns True when the item is skipped: --policy
    oom.action=skip, skip.py).  The bare name before `continue` is room that
    reraise.py turns into the pops its re-raise form needs there (nothing is
    called).  A while statement's handler, outside the loop, cannot continue it:
    `__portal_rescue__(LINE, BODY_SPAN)` then `raise`."""
    args = [ast.Constant(value=loop_line)]
    if body_span is not None:
        args.append(ast.Constant(value=body_span))
    call = ast.Call(func=ast.Name(id=RESCUE_NAME, ctx=ast.Load()), args=args, keywords=[])
    if body_span is None:
        skipped = [ast.Expr(value=ast.Name(id=RESCUE_NAME, ctx=ast.Load())), ast.Continue()]
        body = [ast.If(test=call, body=skipped, orelse=[]), ast.Raise(exc=None, cause=None)]
    else:
        body = [ast.Expr(value=call), ast.Raise(exc=None, cause=None)]
    return _no_loc(ast.ExceptHandler(
        type=ast.Name(id=CATCH_NAME, ctx=ast.Load()), name=None, body=body))


# What _calls() gives for a call with a `generator=` keyword (not a name).
_GENERATOR_PASSED = rng_names.GENERATOR_KEYWORD + "="
# The prefix of a name handed to a call as an argument (not a name either).
_HANDED = "&"


def _reaches(called, functions):
    """Whether _calls()'s names call one of `functions` (names of the module's
    functions), or hand one to a call."""
    return not called.isdisjoint(functions) or \
        any(name[0] == _HANDED and name[1:] in functions for name in called)


def _calls(stmts):
    """The names the statements (not the functions or classes they define) call:
    `f(...)` gives f, `x.f(...)` gives f; a name handed to a call, which may call
    it back (`opt.step(closure)`), gives _HANDED + closure (a function of the
    module's by that name is taken as called: _reaches); a call passing
    `generator=` gives _GENERATOR_PASSED."""
    todo, names = list(stmts), set()
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
            elif isinstance(node.func, ast.Name):
                names.add(node.func.id)
            for k in node.keywords:
                if k.arg == rng_names.GENERATOR_KEYWORD:
                    names.add(_GENERATOR_PASSED)
                elif isinstance(k.value, ast.Name):
                    names.add(_HANDED + k.value.id)
            names.update(_HANDED + a.id for a in node.args if isinstance(a, ast.Name))
        todo.extend(ast.iter_child_nodes(node))
    return names


def _marks_itself(called):
    """A body that calls these names needs its iterations marked: it calls
    `.backward()` or draws random numbers (rng_names.py: by name, or a call
    passing `generator=`)."""
    return "backward" in called or _GENERATOR_PASSED in called \
        or not called.isdisjoint(rng_names.DRAWING)


def _calls_backward(stmts, training=frozenset()):
    """Whether the statements call a method named `backward` or draw random
    numbers (_marks_itself), or call a function of the module's own (by name) that
    does, however deep: a loop whose iterations are marked (iteration.py)."""
    called = _calls(stmts)
    return _marks_itself(called) or _reaches(called, training)


def _training_functions(tree):
    """The names of the module's functions and methods whose bodies call
    `.backward()` or draw random numbers (_marks_itself), directly or through
    other functions of the module (by name: a Trainer's fit -> _train_epoch ->
    _step).  Names, not bindings: a same-named function elsewhere is taken too,
    which costs only a mark."""
    calls = {}
    for node in _walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls.setdefault(node.name, set()).update(_calls(node.body))
    training = {name for name, called in calls.items() if _marks_itself(called)}
    grew = True
    while grew:
        grew = False
        for name, called in calls.items():
            if name not in training and _reaches(called, training):
                training.add(name)
                grew = True
    return frozenset(training)


def _mentions_numpy_random(stmts):
    """Whether the statements mention `np.random` or `numpy.random`, or import
    from it (`from numpy.random import rand`)."""
    return any((isinstance(n, ast.Attribute) and n.attr == "random" and isinstance(n.value, ast.Name)
                and n.value.id in ("np", "numpy"))
               or (isinstance(n, ast.ImportFrom) and n.level == 0
                   and (n.module == "numpy.random" or (n.module == "numpy" and
                                                       any(a.name == "random" for a in n.names))))
               for s in stmts for n in _walk(s))


def _target_names(loop):
    """The plain names a for loop binds each iteration, in order (`for i, (x, y)
    in ...` gives i, x, y; `for self.x in` none)."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return ()
    return tuple(n.id for n in _walk(loop.target)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))


def _iteration_call(loop_line, loc, numpy_too, targets=(), rebound=()):
    """`__portal_iteration__(LOOP_LINE[, NUMPY[, NAMES, (VALUES...)]][, rebound=NAMES])`
    at `loc`, the body's first statement: its line event is that statement's own, so
    tracers see no difference.  NUMPY: the module mentions numpy's global generator;
    NAMES, VALUES: the loop's targets as the iteration starts (the body may rebind
    them: `x = augment(x)`); rebound: the other variables the body rebinds
    (_rebound_names), whose values the mark reads itself (one may be unbound)."""
    args = [_copy_loc(ast.Constant(value=loop_line), loc)]
    if numpy_too or targets:
        args.append(_copy_loc(ast.Constant(value=bool(numpy_too)), loc))
    if targets:
        args.append(_copy_loc(ast.Constant(value=targets), loc))
        args.append(_copy_loc(ast.Tuple(elts=[_copy_loc(ast.Name(id=name, ctx=ast.Load()), loc)
                                              for name in targets], ctx=ast.Load()), loc))
    keywords = []
    if rebound:
        keywords.append(_copy_loc(ast.keyword(arg="rebound", value=_copy_loc(ast.Constant(value=rebound), loc)),
                                  loc))
    call = ast.Call(func=_copy_loc(ast.Name(id=ITERATION_NAME, ctx=ast.Load()), loc),
                    args=args, keywords=keywords)
    return _copy_loc(ast.Expr(value=_copy_loc(call, loc)), loc)


_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _rebound_names(stmts, targets=()):
    """The plain variables the statements rebind that the next iteration may read
    as this one left them (what a rerun would read changed: bytecode/carried.py),
    but the loop's own targets, in order: an augmented assignment's (`epoch += 1`,
    `total += loss`), and one read in the body before its first store in the
    source (`prev` of `delta = x - prev; prev = x`).  Not those of the functions,
    classes and comprehensions the statements hold.  `batch = next(it)` before any
    read of batch is left out: the rerun stores it again before it reads it."""
    todo, order, loaded, stored, augmented = list(reversed(stmts)), [], {}, {}, set()
    after = {}          # id of a Name an assignment stores -> where: after its value
    while todo:
        node = todo.pop()
        if isinstance(node, _OWN_SCOPES):
            continue
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            augmented.add(node.target.id)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            end = (node.value.end_lineno, node.value.end_col_offset)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                after.update((id(n), end) for n in ast.walk(target) if isinstance(n, ast.Name))
        if isinstance(node, ast.Name) and node.id not in targets:
            where = after.get(id(node), (node.lineno, node.col_offset))
            seen = stored if isinstance(node.ctx, ast.Store) else loaded
            if node.id not in order:
                order.append(node.id)
            seen[node.id] = min(seen.get(node.id, where), where)
        todo.extend(reversed(list(ast.iter_child_nodes(node))))
    return tuple(name for name in order if name in stored and
                 (name in augmented or loaded.get(name, (1 << 62,)) < stored[name]))


def _fake_call(index, loc):
    """`__portal_fake_oom__(I)`, or with several specs on one line one call with all
    their indexes, `__portal_fake_oom__((I, J))`: every spec counts every start of
    the line, even when another spec of that line raises there."""
    call = ast.Call(func=_copy_loc(ast.Name(id=FAKE_OOM_NAME, ctx=ast.Load()), loc),
                    args=[_copy_loc(ast.Constant(value=index), loc)], keywords=[])
    return _copy_loc(ast.Expr(value=_copy_loc(call, loc)), loc)


def _start(stmt):
    """The node where a statement starts: its first decorator, if any (a decorated
    def/class runs its decorator lines first)."""
    decorators = getattr(stmt, "decorator_list", None)
    return decorators[0] if decorators else stmt


def _is_docstring(stmt):
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def _is_future(stmt):
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__" \
        and stmt.level == 0


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _is_generator_like(fn):
    """Does the function compile to a generator, coroutine or async generator?"""
    if isinstance(fn, ast.AsyncFunctionDef):
        return True
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, _NESTED_SCOPES):
            # a nested scope's yields are its own; its decorators, defaults and
            # annotations are evaluated here
            todo.extend(getattr(node, "decorator_list", ()))
            args = getattr(node, "args", None)
            if args is not None:
                todo.extend(d for d in args.defaults + args.kw_defaults if d is not None)
            todo.extend(getattr(node, "bases", ()))
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def _scope_start(scope):
    """Static block depth a def's or class's body starts at."""
    if GENERATOR_BLOCKS and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) \
            and _is_generator_like(scope):
        return GENERATOR_BLOCKS
    return 0


class _Rewriter:
    def __init__(self, fake_lines, wrap, training=frozenset(), numpy_random=False):
        self.fake_lines = fake_lines      # line -> [spec index, ...]
        self.wrap = wrap
        self.training = training          # _training_functions()
        self.numpy_random = numpy_random  # the module mentions np.random
        self.memo = {}
        self.wrapped = []

    # A statement list at static block depth `depth`; `kind` says whether it is a
    # module/def/class body (docstring, __future__ imports stay first).
    def body(self, stmts, depth, kind=None):
        stmts = [self.stmt(s, depth) for s in stmts]
        if self.fake_lines:
            stmts = self.insert_fake(stmts, kind)
        return stmts

    def stmt(self, s, depth):
        """Rewrite `s` in place; returns the statement that replaces it (a wrapped
        while loop is replaced by the try around it)."""
        if isinstance(s, ast.While):
            return self.while_loop(s, depth)
        if isinstance(s, _LOOPS):
            self.loop(s, depth)
        elif isinstance(s, _SCOPES):
            s.body = self.body(s.body, _scope_start(s),
                               "class" if isinstance(s, ast.ClassDef) else "def")
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            s.body = self.body(s.body, depth + len(s.items))
        elif isinstance(s, ast.Try) or (_TRY_STAR and isinstance(s, _TRY_STAR)):
            base = depth + (1 if s.finalbody and s.handlers else 0)
            s.body = self.body(s.body, base + 1)
            for h in s.handlers:
                h.body = self.body(h.body, base + 2)
            s.orelse = self.body(s.orelse, base)
            s.finalbody = self.body(s.finalbody, depth + 1)
        elif isinstance(s, ast.If):
            s.body = self.body(s.body, depth)
            s.orelse = self.body(s.orelse, depth)
        elif isinstance(s, ast.Match):
            for c in s.cases:
                c.body = self.body(c.body, depth)
        return s

    def loop(self, s, depth):
        # Wrapped, the body sits under the loop block and our try block, and our
        # handler body under the loop block and the two handler blocks.
        fits = (self.wrap
                and depth + 2 + _need_list(s.body, self.memo) <= MAX_BLOCKS
                and depth + 3 <= MAX_BLOCKS)
        body = self.body(s.body, depth + (2 if fits else 1))
        if fits and (_calls_backward(s.body, self.training) or comprehensions.iterates_loader(s.body)):
            body.insert(0, _iteration_call(s.lineno, _start(body[0]), self.numpy_random,
                                           _target_names(s), _rebound_names(s.body, _target_names(s))))
        if fits:
            first, last = body[0], body[-1]
            t = ast.Try(body=body, handlers=[_handler(s.lineno)], orelse=[], finalbody=[],
                        lineno=first.lineno, col_offset=first.col_offset,
                        end_lineno=last.end_lineno, end_col_offset=last.end_col_offset)
            body = [t]
            self.wrapped.append(s.lineno)
        s.body = body
        s.orelse = self.body(s.orelse, depth)

    def while_loop(self, s, depth):
        # The whole statement is wrapped: the body sits under our try block and the
        # loop block, the else clause under our try block, our handler body under
        # the two handler blocks.
        fits = (self.wrap
                and depth + 2 + _need_list(s.body, self.memo) <= MAX_BLOCKS
                and depth + 1 + _need_list(s.orelse, self.memo) <= MAX_BLOCKS
                and depth + 2 <= MAX_BLOCKS)
        s.body = self.body(s.body, depth + (2 if fits else 1))
        s.orelse = self.body(s.orelse, depth + (1 if fits else 0))
        if not fits:
            return s
        if _calls_backward(s.body, self.training) or comprehensions.iterates_loader(s.body):
            s.body.insert(0, _iteration_call(s.lineno, _start(s.body[0]), self.numpy_random,
                                             rebound=_rebound_names(s.body)))
        first, last = _start(s.body[0]), s.body[-1]
        span = (first.lineno, first.col_offset, last.end_lineno, last.end_col_offset)
        self.wrapped.append(s.lineno)
        return _copy_loc(ast.Try(body=[s], handlers=[_handler(s.lineno, span)],
                                 orelse=[], finalbody=[]), s)

    def insert_fake(self, stmts, kind):
        out = []
        # Statements that must stay first: a docstring, then (module) __future__ imports.
        head = 0
        if kind is not None and stmts and _is_docstring(stmts[0]):
            head = 1
        if kind == "module":
            while head < len(stmts) and _is_future(stmts[head]):
                head += 1
        pending = []       # fake calls for head statements, placed right after the head
        prev_line = None
        for i, s in enumerate(stmts):
            start = _start(s)
            line = start.lineno
            indexes = self.fake_lines.get(line) if line != prev_line else None
            prev_line = line
            if indexes:
                calls = [_fake_call(indexes[0] if len(indexes) == 1 else tuple(indexes), start)]
                if i < head:
                    pending.extend(calls)
                else:
                    out.extend(calls)
            out.append(s)
            if i == head - 1:
                out.extend(pending)
        return out


def instrument(tree, *, fake_oom=None, wrap=True):
    """Rewrite `tree` (an ast.Module, modified in place) and return it with the list of
    the line numbers of the loops whose bodies were wrapped, in source order of their
    bodies' completion (innermost first within a nest).

    fake_oom: None, or a list of (spec_index, line): before every statement that
    starts on `line`, a call ``__portal_fake_oom__(spec_index)`` with the statement's
    location is inserted (a test fixture, docs/architecture.md, "The fake-OOM fixture").  wrap=False inserts only
    those calls (a file that is not the user's own code)."""
    fake_lines = {}
    for index, line in fake_oom or ():
        fake_lines.setdefault(int(line), []).append(int(index))
    training = _training_functions(tree) if wrap else frozenset()
    r = _Rewriter(fake_lines, wrap, training, wrap and _mentions_numpy_random(tree.body))
    tree.body = r.body(tree.body, 0, "module")
    return tree, r.wrapped


def compile_user_source(source, filename, fake_oom=None, *, wrap=True):
    """compile(source, filename, "exec", dont_inherit=True) of the instrumented source.

    `source` is bytes (coding cookie and BOM honoured, as compile() does) or str.
    A SyntaxError (or any other error) is exactly the one compile() raises for the
    plain source.  Should the instrumented tree ever not compile where the plain
    source does, the plain code is returned: a program that python runs always runs."""
    try:
        tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (RecursionError, MemoryError):
        tree = None           # too deep for the ast module: fall back, outside the handler
    if tree is not None:
        try:
            tree, _ = instrument(tree, fake_oom=fake_oom, wrap=wrap)
        except (RecursionError, MemoryError):
            tree = None
    if tree is None:
        return _plain(source, filename)
    try:
        code = compile(tree, filename, "exec", dont_inherit=True)
        return reraise.keep_lines(generator_close.keep_close(code, RESCUE_NAME), RESCUE_NAME)
    except SyntaxError as exc:
        # An error of the compiler stage ('return' outside function, ...): raise
        # python's own.  If plain compile() succeeds, the error was either a warning
        # turned into an error (python raises the same) or a nesting overflow of
        # ours, which the budget rules out (then run uninstrumented).
        error = exc
    except (RecursionError, MemoryError, ValueError, TypeError):
        error = None
    try:
        code = _plain(source, filename)
    finally:
        tree = None
    if error is not None and error.msg != "too many statically nested blocks":
        raise error
    return code


def _plain(source, filename):
    # The parse already issued its warnings once.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(source, filename, "exec", dont_inherit=True)
