"""CPython 3.14's bytecode, as the bytecode layer needs it: one table per fact.

Only `tables.py` imports this module (on 3.14); everything else reads the facts
through `tables.T`.  What differs from 3.13 (v313.py, whose other facts hold here
too), from CPython 3.14's Python/bytecodes.c (its stack comments; the generated
Include/internal/pycore_opcode_metadata.h) and Lib/dis.py, checked against 3.14's
own `dis` on its stdlib (tests/unit/python/test_codemap.py):

* gone: BINARY_SUBSCR (now BINARY_OP with NB_SUBSCR), RETURN_CONST (LOAD_CONST,
  RETURN_VALUE), BEFORE_WITH/BEFORE_ASYNC_WITH (LOAD_SPECIAL), LOAD_ASSERTION_ERROR
  (LOAD_COMMON_CONSTANT), BUILD_CONST_KEY_MAP;
* new: LOAD_SMALL_INT (an int constant 0..255 in its argument, not in co_consts),
  LOAD_FAST_BORROW and LOAD_FAST_BORROW_LOAD_FAST_BORROW (LOAD_FAST's that push a
  reference owning no count), NOT_TAKEN (after a conditional jump, for branch
  events; a no-op), POP_ITER (a for loop's iterator is popped after END_FOR),
  LOAD_SPECIAL, LOAD_COMMON_CONSTANT, BUILD_TEMPLATE/BUILD_INTERPOLATION (t-strings);
* a with statement enters by `COPY 1; LOAD_SPECIAL __exit__; SWAP 2; SWAP 3;
  LOAD_SPECIAL __enter__; CALL 0`: the block runs over two slots, [__exit__ (the
  unbound function), the manager], instead of 3.13's bound __exit__;
* CALL_FUNCTION_EX has no argument: always [func, NULL, args, kwargs or NULL];
* END_ASYNC_FOR has a "target" in dis (back to its SEND, for instrumentation) but
  does not jump: decoded with that target, it gives the CFG no edge (NOT_JUMPS);
* a handler entry's `lasti` is a tagged integer on the stack (frame_access_314.c);
* caches: TO_BOOL 3, BINARY_OP 5, CALL/CALL_KW 3, LOAD_ATTR 9 (read from opcode).
"""
import opcode

VERSION = (3, 14)

# Real opcodes only: the pseudo-instructions (>= 256) never reach co_code.
_REAL = 256
OPNAME = tuple(opcode.opname[:_REAL])
OPMAP = {k: v for k, v in opcode.opmap.items() if v < _REAL}
EXTENDED_ARG = opcode.EXTENDED_ARG
HAS_ARG = frozenset(op for op in opcode.hasarg if op < _REAL)
CACHES = tuple(opcode._inline_cache_entries.get(OPNAME[op], 0) for op in range(_REAL))
HASJREL = frozenset(op for op in opcode.hasjrel if op < _REAL)
HASJABS = frozenset(op for op in getattr(opcode, "hasjabs", ()) if op < _REAL)
# END_ASYNC_FOR's argument points back at its SEND (dis gives it as a target, for
# instrumentation), but it never jumps there: a target, and no edge (NOT_JUMPS).
BACKWARD = frozenset(OPMAP[n] for n in ("JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "END_ASYNC_FOR"))
NOT_JUMPS = frozenset((OPMAP["END_ASYNC_FOR"],))
UNCONDITIONAL = frozenset(OPMAP[n] for n in (
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
TERMINAL = frozenset(OPMAP[n] for n in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE"))

# CO_MAXBLOCKS (Include/internal/pycore_compile.h, as in 3.13): measured, 21 nested for
# loops compile, 22 do not.
MAX_BLOCKS = 21

# Blocks a generator's or coroutine's body starts under (as 3.13: one, the implicit handler that turns a StopIteration
# leaving the body into a RuntimeError (measured: 21 nested for loops compile in a
# plain function, 20 in a generator or coroutine)).
GENERATOR_BLOCKS = 1

# A generator's close() at a `yield` that no try block of the code encloses ends
# it without throwing GeneratorExit into the frame (no trace events, no frame
# run): the compiler marks that yield's RESUME with this bit of its argument
# (RESUME_OPARG_DEPTH1_MASK, Include/internal/pycore_opcode_utils.h), only after
# YIELD_VALUE (RESUME_AFTER_YIELD).
RESUME_AFTER_YIELD = 1
RESUME_DEPTH1 = 0x4


def jump_target(op_offset: int, end: int, op: int, arg: int) -> int:
    """Byte offset a relative jump goes to: 3.14, as 3.13, counts from the end of the
    jump's caches (`end`), as dis._get_jump_target does."""
    if op in BACKWARD:
        return end - 2 * arg
    return end + 2 * arg


def stack_effect(op: int, arg, jumped: bool) -> int:
    # RETURN_GENERATOR counts its push of the first sent value (None) already.
    return opcode.stack_effect(op, arg if op in HAS_ARG else None, jump=jumped)


# How many stack items an instruction consumes (or replaces), from the stack
# comments of 3.14's bytecodes.c (an item kept in place, as CHECK_EXC_MATCH's
# left operand or GET_LEN's object, is not consumed).  Variable ones in pops().
FIXED_POPS = {
    "NOP": 0, "RESUME": 0, "POP_TOP": 1, "PUSH_NULL": 0, "END_FOR": 1,
    "END_SEND": 2, "POP_ITER": 1, "NOT_TAKEN": 0, "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1,
    "TO_BOOL": 1, "BINARY_OP": 2, "BINARY_SLICE": 3,
    "STORE_SLICE": 4, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "GET_LEN": 0,
    "MATCH_MAPPING": 0, "MATCH_SEQUENCE": 0, "MATCH_KEYS": 0, "MATCH_CLASS": 3,
    "CHECK_EXC_MATCH": 1, "CHECK_EG_MATCH": 2, "WITH_EXCEPT_START": 0,
    "GET_AITER": 1, "GET_ANEXT": 0, "LOAD_SPECIAL": 1,
    "END_ASYNC_FOR": 2, "CLEANUP_THROW": 3, "GET_ITER": 1, "GET_YIELD_FROM_ITER": 1,
    "GET_AWAITABLE": 1, "LOAD_BUILD_CLASS": 0, "LOAD_COMMON_CONSTANT": 0,
    "LOAD_LOCALS": 0, "RETURN_GENERATOR": 0, "RETURN_VALUE": 1, "LOAD_SMALL_INT": 0,
    "SETUP_ANNOTATIONS": 0, "YIELD_VALUE": 1, "POP_EXCEPT": 1, "EXIT_INIT_CHECK": 1,
    "MAKE_FUNCTION": 1, "SET_FUNCTION_ATTRIBUTE": 2, "FORMAT_SIMPLE": 1,
    "FORMAT_WITH_SPEC": 2, "CONVERT_VALUE": 1, "CALL_INTRINSIC_1": 1,
    "CALL_INTRINSIC_2": 2, "STORE_NAME": 1, "DELETE_NAME": 0, "UNPACK_SEQUENCE": 1,
    "UNPACK_EX": 1, "STORE_ATTR": 2, "DELETE_ATTR": 1, "STORE_GLOBAL": 1,
    "DELETE_GLOBAL": 0, "LOAD_CONST": 0, "LOAD_NAME": 0, "LOAD_GLOBAL": 0,
    "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 3, "LOAD_FROM_DICT_OR_GLOBALS": 1,
    "LOAD_FROM_DICT_OR_DEREF": 1, "COMPARE_OP": 2, "IS_OP": 2, "CONTAINS_OP": 2,
    "IMPORT_NAME": 2, "IMPORT_FROM": 0, "JUMP_FORWARD": 0, "JUMP_BACKWARD": 0,
    "JUMP_BACKWARD_NO_INTERRUPT": 0, "POP_JUMP_IF_FALSE": 1, "POP_JUMP_IF_TRUE": 1,
    "POP_JUMP_IF_NONE": 1, "POP_JUMP_IF_NOT_NONE": 1, "LOAD_FAST": 0,
    "LOAD_FAST_CHECK": 0, "LOAD_FAST_AND_CLEAR": 0, "LOAD_FAST_LOAD_FAST": 0,
    "LOAD_FAST_BORROW": 0, "LOAD_FAST_BORROW_LOAD_FAST_BORROW": 0,
    "STORE_FAST": 1, "STORE_FAST_LOAD_FAST": 1, "STORE_FAST_STORE_FAST": 2,
    "DELETE_FAST": 0, "MAKE_CELL": 0, "LOAD_DEREF": 0, "STORE_DEREF": 1,
    "DELETE_DEREF": 0, "COPY_FREE_VARS": 0, "LIST_APPEND": 1, "SET_ADD": 1,
    "MAP_ADD": 2, "LIST_EXTEND": 1, "SET_UPDATE": 1, "DICT_MERGE": 1,
    "DICT_UPDATE": 1, "FOR_ITER": 0, "SEND": 1, "RERAISE": 1,
    "CALL_FUNCTION_EX": 4, "BUILD_TEMPLATE": 2,
}

_ARG_POPS = frozenset(("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING",
                       "BUILD_SLICE", "RAISE_VARARGS"))


def pops(name: str, arg, jumped: bool):
    """Items consumed by a variable-count instruction; None: use the table or
    -stack_effect."""
    if name in _ARG_POPS:
        return arg
    if name == "BUILD_MAP":
        return 2 * arg
    if name == "CALL":
        return arg + 2
    if name == "CALL_KW":
        return arg + 3
    if name == "BUILD_INTERPOLATION":   # value, str, then the format spec if arg & 1
        return 2 + (arg & 1)
    return None


# LOAD_SPECIAL pushes [the method, self]: for __exit__ that is the with block's
# [__exit__, manager] (after COPY and SWAPs); __enter__'s pair is consumed at once
# by its CALL 0.
PUSH_KINDS = {
    "GET_ITER": ("iter",),
    "GET_AITER": ("aiter",),
    "LOAD_SPECIAL": ("exit", "unknown"),
}

# -- fast locals (liveness) ----------------------------------------------------

_NONE = ((), ())
_LOW4 = 15
_ONE_READ = frozenset(OPMAP[n] for n in (
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "DELETE_FAST",
    # saves the outer value of an inlined comprehension's variable on the stack;
    # the STORE_FAST after the comprehension puts it back: a read of the value
    "LOAD_FAST_AND_CLEAR"))
_TWO_READS = frozenset(OPMAP[n] for n in ("LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"))
_STORE_FAST = OPMAP["STORE_FAST"]
_STORE_FAST_LOAD_FAST = OPMAP["STORE_FAST_LOAD_FAST"]
_STORE_FAST_STORE_FAST = OPMAP["STORE_FAST_STORE_FAST"]


def fast_uses_defs(op: int, arg):
    """(slots read, slots written) of fast locals by one instruction.  A read and a
    write of the same slot in one instruction (STORE_FAST_LOAD_FAST x, x) counts
    as a read of the old value too: more live, never less."""
    if op in _ONE_READ:
        return (arg,), ()
    if op == _STORE_FAST:
        return (), (arg,)
    if op in _TWO_READS:
        return (arg >> 4, arg & _LOW4), ()
    if op == _STORE_FAST_LOAD_FAST:
        return (arg & _LOW4,), (arg >> 4,)
    if op == _STORE_FAST_STORE_FAST:
        return (), (arg >> 4, arg & _LOW4)
    return _NONE


# -- names ------------------------------------------------------------------------

def global_name(arg: int) -> int:
    """co_names index of a LOAD_GLOBAL (its low bit: push NULL after the value)."""
    return arg >> 1


def global_pushes_null(arg: int) -> bool:
    return bool(arg & 1)


def attribute(ins):
    """(co_names index, is a method load) of an attribute load, or None."""
    if ins.opname == "LOAD_ATTR":
        return ins.arg >> 1, bool(ins.arg & 1)
    return None


# -- the call protocol -------------------------------------------------------------
#
# 3.14, as 3.13: [callable, self_or_null], then the arguments, then (CALL_KW) the keyword
# names' tuple; the call instruction itself is where a caller resumes.
CALL_PROTOCOL = "call_kw"
CALL_SEQUENCE = ("CALL",)


def reenter_operands(reenter, null):
    """The two slots below a call's arguments that make the call call `reenter`."""
    return [reenter, null]


def callable_of(operands, null, kind):
    """The object a call calls, from its two slots below the arguments: always the
    first ([callable, self_or_null]; call_ex: [func, NULL])."""
    return operands[0]


# -- constants -------------------------------------------------------------------------

_LOAD_CONST = OPMAP["LOAD_CONST"]
_LOAD_SMALL_INT = OPMAP["LOAD_SMALL_INT"]
# LOAD_SMALL_INT pushes its argument (0..255), which is not in co_consts.
CONSTANT_LOADS = frozenset(("LOAD_CONST", "LOAD_SMALL_INT"))
_NO_CONSTANT = (False, None)


def constant(code, ins):
    """(True, value) when `ins` pushes a constant (LOAD_CONST, LOAD_SMALL_INT), else
    (False, None)."""
    if ins.opcode == _LOAD_CONST:
        return True, code.co_consts[ins.arg]
    if ins.opcode == _LOAD_SMALL_INT:
        return True, ins.arg
    return _NO_CONSTANT


def call_ex_kwargs_slot(arg) -> bool:
    """CALL_FUNCTION_EX (no argument) always has the **kwargs slot (NULL when none)."""
    return True


# The instructions that enter a with statement's block, the manager on top of the
# stack before the first (COPY 1; LOAD_SPECIAL __exit__; SWAP 2; SWAP 3;
# LOAD_SPECIAL __enter__; CALL 0); the block's handler covers the one after the last.
WITH_ENTER = ("COPY", "LOAD_SPECIAL", "SWAP", "SWAP", "LOAD_SPECIAL", "CALL")


# The forward conditional jump an `except E:` clause takes when E does not match.
JUMP_IF_FALSE = "POP_JUMP_IF_FALSE"

# -- with statements -----------------------------------------------------------------

WITH_HANDLER = ("PUSH_EXC_INFO", "WITH_EXCEPT_START", "TO_BOOL", "POP_JUMP_IF_TRUE")


# -- super() -------------------------------------------------------------------------

_LOAD_SUPER_METHOD = 1      # LOAD_SUPER_ATTR's bit: load a method ([meth, self])
_LOAD_SUPER_TWO_ARGS = 2    # LOAD_SUPER_ATTR's bit: super(cls, obj), not super()
_LOAD_SUPER_NAME_SHIFT = 2  # LOAD_SUPER_ATTR's argument: co_names index << 2 | bits
# Argument loads of plain fast locals, and how many values each pushes.
_PLAIN_ARGUMENT_LOADS = {"LOAD_FAST": 1, "LOAD_FAST_CHECK": 1, "LOAD_FAST_LOAD_FAST": 2,
                         "LOAD_FAST_BORROW": 1, "LOAD_FAST_BORROW_LOAD_FAST_BORROW": 2}
_FIRST_ARGUMENT_LOADS = frozenset(("LOAD_FAST", "LOAD_FAST_BORROW"))


def super_method_call(code, instrs, k):
    """NAME when instrs[:k] ends with a call `super().NAME(a, b, ...)` of the builtin
    name `super` with no arguments, the method's arguments plain fast locals; else
    None.  3.14: LOAD_GLOBAL super, LOAD_DEREF __class__, LOAD_FAST or
    LOAD_FAST_BORROW (the first argument), LOAD_SUPER_ATTR NAME (method), the
    arguments' loads (two in one LOAD_FAST_LOAD_FAST or its borrowing form), CALL n."""
    if k < 1 or instrs[k - 1].opname != "CALL":
        return None
    left = instrs[k - 1].arg
    j = k - 2
    while left > 0 and j >= 0 and instrs[j].opname in _PLAIN_ARGUMENT_LOADS:
        left -= _PLAIN_ARGUMENT_LOADS[instrs[j].opname]
        j -= 1
    if left != 0 or j < 3:
        return None
    load_super, cls, first, super_attr = instrs[j - 3:j + 1]
    if super_attr.opname != "LOAD_SUPER_ATTR" or not super_attr.arg & _LOAD_SUPER_METHOD \
            or super_attr.arg & _LOAD_SUPER_TWO_ARGS:
        return None
    if load_super.opname != "LOAD_GLOBAL" or global_pushes_null(load_super.arg) \
            or code.co_names[global_name(load_super.arg)] != "super":
        return None
    if cls.opname != "LOAD_DEREF" or code._varname_from_oparg(cls.arg) != "__class__":
        return None
    if first.opname not in _FIRST_ARGUMENT_LOADS or first.arg != 0:
        return None
    return code.co_names[super_attr.arg >> _LOAD_SUPER_NAME_SHIFT]


# -- a frame's variables by name ---------------------------------------------------------

# The loads of one of a frame's variables whose dis argval is its name (or, for
# LOAD_FAST_LOAD_FAST, the tuple of both names).
VARIABLE_LOADS = frozenset(("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW",
                            "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "LOAD_DEREF"))
