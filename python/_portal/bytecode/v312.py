"""CPython 3.12's bytecode, as the bytecode layer needs it: one table per fact.

Only `tables.py` imports this module (on 3.12); everything else reads the facts
through `tables.T`.  3.12 sits between 3.11 (v311.py) and 3.13 (v313.py); from
CPython 3.12.5's Python/bytecodes.c, Lib/opcode.py and Lib/dis.py, and checked
against 3.12's own `dis` on its stdlib (tests/unit/python/test_codemap.py):

* caches: `opcode._inline_cache_entries` is a list indexed by opcode (as in 3.11);
  FOR_ITER and SEND have a cache entry, and a relative jump counts from the end of
  its caches (dis._get_jump_target: offset + 2 + 2 * caches + 2 * signed arg);
* calls: no PRECALL (as in 3.13), but the operands keep 3.11's order: `CALL n` takes
  [NULL, callable] or [method, self], then the arguments (LOAD_GLOBAL's and
  LOAD_ATTR's low bit push the NULL *before* the value); keyword names are set by
  KW_NAMES (kept in a C local of the interpreter, as in 3.11) before the CALL, so
  a caller resumes at the KW_NAMES;
* LOAD_ATTR's argument is name << 1 | method (LOAD_METHOD is gone, as in 3.13);
* new since 3.11: END_FOR (two POP_TOPs) and END_SEND, RETURN_CONST,
  CALL_INTRINSIC_1/2, LOAD_FAST_CHECK, LOAD_FAST_AND_CLEAR (inlined comprehensions,
  PEP 709, as in 3.13), LOAD_SUPER_ATTR, BINARY_SLICE/STORE_SLICE,
  LOAD_FROM_DICT_OR_GLOBALS/LOAD_FROM_DICT_OR_DEREF; 3.11's FORMAT_VALUE and
  MAKE_FUNCTION's flag argument stay (3.13 replaced them), and there is no TO_BOOL,
  no LOAD_FAST_LOAD_FAST and no CALL_KW;
* conditional jumps are POP_JUMP_IF_{FALSE,TRUE,NONE,NOT_NONE}, forward only;
* a with statement's handler tests __exit__'s result with POP_JUMP_IF_TRUE;
* the exception table keeps 3.11's format (6-bit varints, start marker bit 7).
"""
import opcode

VERSION = (3, 12)

# Real opcodes only: the pseudo-instructions (>= 256) never reach co_code.
_REAL = 256
OPNAME = tuple(opcode.opname[:_REAL])
OPMAP = {k: v for k, v in opcode.opmap.items() if v < _REAL}
EXTENDED_ARG = opcode.EXTENDED_ARG
HAS_ARG = frozenset(op for op in opcode.hasarg if op < _REAL)
CACHES = tuple(opcode._inline_cache_entries[:_REAL])
HASJREL = frozenset(op for op in opcode.hasjrel if op < _REAL)
HASJABS = frozenset(op for op in opcode.hasjabs if op < _REAL)   # none in 3.12
BACKWARD = frozenset(OPMAP[n] for n in ("JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
# Instructions with a jump target that never jump (3.14's END_ASYNC_FOR): none in 3.12.
NOT_JUMPS = frozenset()
UNCONDITIONAL = frozenset(OPMAP[n] for n in (
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
TERMINAL = frozenset(OPMAP[n] for n in (
    "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"))

# CO_MAXBLOCKS (Include/cpython/code.h in 3.12: 21): measured, 21 nested for loops
# compile, 22 do not.
MAX_BLOCKS = 21

# Blocks a generator's or coroutine's body starts under (3.12: one, the implicit
# handler that turns a StopIteration leaving the body into a RuntimeError, new in
# 3.12 as in 3.13; measured: 21 nested for loops compile in a plain function, 20 in
# a generator).
GENERATOR_BLOCKS = 1

# 3.12.5's gen.close() tests the exception-handler depth of the YIELD_VALUE it is
# suspended at by reading that instruction's opcode where its argument is meant
# (Objects/genobject.c, gen_close: `prev_instr[0].op.code`), so the test never
# holds and close() always throws GeneratorExit into the frame, as 3.11's does:
# there is no mark to give (generator_close.py changes nothing).
RESUME_AFTER_YIELD = 1
RESUME_DEPTH1 = None


def jump_target(op_offset: int, end: int, op: int, arg: int) -> int:
    """Byte offset a relative jump goes to: 3.12 counts from the end of the
    jump's caches (`end`), as dis._get_jump_target does."""
    if op in BACKWARD:
        return end - 2 * arg
    return end + 2 * arg


_RETURN_GENERATOR = OPMAP["RETURN_GENERATOR"]


def stack_effect(op: int, arg, jumped: bool) -> int:
    if op == _RETURN_GENERATOR:
        # As in 3.11: the frame returns the generator; when it is first resumed,
        # gen_send_ex pushes the sent value (None), which the POP_TOP after drops.
        return 1
    return opcode.stack_effect(op, arg if op in HAS_ARG else None, jump=jumped)


# How many stack items an instruction consumes (or replaces), from the stack
# comments of 3.12's bytecodes.c (an item kept in place, as CHECK_EXC_MATCH's
# left operand or GET_LEN's object, is not consumed).  Variable ones in pops().
FIXED_POPS = {
    "NOP": 0, "RESUME": 0, "POP_TOP": 1, "PUSH_NULL": 0, "END_FOR": 2,
    "END_SEND": 2, "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1,
    "BINARY_OP": 2, "BINARY_SUBSCR": 2, "BINARY_SLICE": 3,
    "STORE_SLICE": 4, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "GET_LEN": 0,
    "MATCH_MAPPING": 0, "MATCH_SEQUENCE": 0, "MATCH_KEYS": 0, "MATCH_CLASS": 3,
    "CHECK_EXC_MATCH": 1, "CHECK_EG_MATCH": 2, "WITH_EXCEPT_START": 0,
    "GET_AITER": 1, "GET_ANEXT": 0, "BEFORE_ASYNC_WITH": 1, "BEFORE_WITH": 1,
    "END_ASYNC_FOR": 2, "CLEANUP_THROW": 3, "GET_ITER": 1, "GET_YIELD_FROM_ITER": 1,
    "GET_AWAITABLE": 1, "LOAD_BUILD_CLASS": 0, "LOAD_ASSERTION_ERROR": 0,
    "LOAD_LOCALS": 0, "RETURN_GENERATOR": 0, "RETURN_VALUE": 1, "RETURN_CONST": 0,
    "SETUP_ANNOTATIONS": 0, "YIELD_VALUE": 1, "POP_EXCEPT": 1,
    "CALL_INTRINSIC_1": 1, "CALL_INTRINSIC_2": 2, "STORE_NAME": 1, "DELETE_NAME": 0,
    "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "STORE_ATTR": 2, "DELETE_ATTR": 1,
    "STORE_GLOBAL": 1, "DELETE_GLOBAL": 0, "LOAD_CONST": 0, "LOAD_NAME": 0,
    "LOAD_GLOBAL": 0, "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 3,
    "LOAD_FROM_DICT_OR_GLOBALS": 1, "LOAD_FROM_DICT_OR_DEREF": 1, "COMPARE_OP": 2,
    "IS_OP": 2, "CONTAINS_OP": 2, "IMPORT_NAME": 2, "IMPORT_FROM": 0,
    "JUMP_FORWARD": 0, "JUMP_BACKWARD": 0, "JUMP_BACKWARD_NO_INTERRUPT": 0,
    "POP_JUMP_IF_FALSE": 1, "POP_JUMP_IF_TRUE": 1, "POP_JUMP_IF_NONE": 1,
    "POP_JUMP_IF_NOT_NONE": 1, "LOAD_FAST": 0, "LOAD_FAST_CHECK": 0,
    "LOAD_FAST_AND_CLEAR": 0, "STORE_FAST": 1, "DELETE_FAST": 0, "MAKE_CELL": 0,
    "LOAD_CLOSURE": 0, "LOAD_DEREF": 0, "STORE_DEREF": 1, "DELETE_DEREF": 0,
    "COPY_FREE_VARS": 0, "LIST_APPEND": 1, "SET_ADD": 1, "MAP_ADD": 2,
    "LIST_EXTEND": 1, "SET_UPDATE": 1, "DICT_MERGE": 1, "DICT_UPDATE": 1,
    "FOR_ITER": 0, "SEND": 1, "RERAISE": 1, "KW_NAMES": 0,
}

_ARG_POPS = frozenset(("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING",
                       "BUILD_SLICE", "RAISE_VARARGS"))
# MAKE_FUNCTION's flags (defaults, kwdefaults, annotations, closure): one operand each.
_MAKE_FUNCTION_FLAGS = 0xF
# FORMAT_VALUE's flag: a format spec on the stack above the value.
_FORMAT_WITH_SPEC = 4


def pops(name: str, arg, jumped: bool):
    """Items consumed by a variable-count instruction; None: use the table or
    -stack_effect."""
    if name in _ARG_POPS:
        return arg
    if name == "BUILD_MAP":
        return 2 * arg
    if name == "BUILD_CONST_KEY_MAP":
        return arg + 1
    if name == "MAKE_FUNCTION":
        return 1 + bin(arg & _MAKE_FUNCTION_FLAGS).count("1")
    if name == "FORMAT_VALUE":
        return 2 if (arg & _FORMAT_WITH_SPEC) else 1
    if name == "CALL":
        return arg + 2
    if name == "CALL_FUNCTION_EX":
        return 3 + (arg & 1)
    return None


PUSH_KINDS = {
    "GET_ITER": ("iter",),
    "GET_AITER": ("aiter",),
    "BEFORE_WITH": ("exit", "unknown"),
    "BEFORE_ASYNC_WITH": ("exit", "unknown"),
}

# -- fast locals (liveness) ----------------------------------------------------

_NONE = ((), ())
_ONE_READ = frozenset(OPMAP[n] for n in (
    "LOAD_FAST", "LOAD_FAST_CHECK", "DELETE_FAST",
    # saves the outer value of an inlined comprehension's variable on the stack;
    # the STORE_FAST after the comprehension puts it back: a read of the value
    "LOAD_FAST_AND_CLEAR"))
_STORE_FAST = OPMAP["STORE_FAST"]


def fast_uses_defs(op: int, arg):
    """(slots read, slots written) of fast locals by one instruction.
    DELETE_FAST raises if unbound: its variable's state is read."""
    if op in _ONE_READ:
        return (arg,), ()
    if op == _STORE_FAST:
        return (), (arg,)
    return _NONE


# -- names ------------------------------------------------------------------------

def global_name(arg: int) -> int:
    """co_names index of a LOAD_GLOBAL (its low bit: push NULL first)."""
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
# 3.12: [NULL, callable] or [method, self], then the arguments; CALL n alone;
# keyword names set by KW_NAMES (kept in a C local of the interpreter) before it.
CALL_PROTOCOL = "kw_names"
CALL_SEQUENCE = ("CALL",)


def reenter_operands(reenter, null):
    """The two slots below a call's arguments that make the call call `reenter`."""
    return [null, reenter]


def callable_of(operands, null, kind):
    """The object a call calls, from its two slots below the arguments."""
    if operands[0] is not null and kind == "call":
        return operands[0]          # [method, self]
    return operands[1]              # [NULL, callable]; call_ex: [NULL, callable]


# -- constants, calls, with entries (the facts the analyses ask by name) ---------------

# The instructions that push a constant: 3.12 has only LOAD_CONST (no LOAD_SMALL_INT).
CONSTANT_LOADS = frozenset(("LOAD_CONST",))
_LOAD_CONST = OPMAP["LOAD_CONST"]
_NO_CONSTANT = (False, None)


def constant(code, ins):
    """(True, value) when `ins` pushes a constant (LOAD_CONST), else (False, None)."""
    if ins.opcode == _LOAD_CONST:
        return True, code.co_consts[ins.arg]
    return _NO_CONSTANT


def call_ex_kwargs_slot(arg) -> bool:
    """Does CALL_FUNCTION_EX `arg` take a **kwargs dict slot (its low bit)?"""
    return bool(arg & 1)


# The instructions that enter a with statement's block, the manager on top of the
# stack before the first; the block's handler covers the one after the last.
WITH_ENTER = ("BEFORE_WITH",)


# The forward conditional jump an `except E:` clause takes when E does not match.
JUMP_IF_FALSE = "POP_JUMP_IF_FALSE"

# -- with statements -----------------------------------------------------------------

WITH_HANDLER = ("PUSH_EXC_INFO", "WITH_EXCEPT_START", "POP_JUMP_IF_TRUE")


# -- super() -------------------------------------------------------------------------

_LOAD_SUPER_METHOD = 1      # LOAD_SUPER_ATTR's bit: load a method ([meth, self])
_LOAD_SUPER_TWO_ARGS = 2    # LOAD_SUPER_ATTR's bit: super(cls, obj), not super()
_LOAD_SUPER_NAME_SHIFT = 2  # LOAD_SUPER_ATTR's argument: co_names index << 2 | bits


def super_method_call(code, instrs, k):
    """NAME when instrs[:k] ends with a call `super().NAME(a, b, ...)` of the builtin
    name `super` with no arguments, the method's arguments plain fast locals; else
    None.  3.12: LOAD_GLOBAL super, LOAD_DEREF __class__, LOAD_FAST (the first
    argument), LOAD_SUPER_ATTR NAME (method), LOAD_FAST each argument, CALL n."""
    if k < 1 or instrs[k - 1].opname != "CALL":
        return None
    nargs = instrs[k - 1].arg
    j = k - 2
    for _ in range(nargs):
        if j < 0 or instrs[j].opname not in ("LOAD_FAST", "LOAD_FAST_CHECK"):
            return None
        j -= 1
    if j < 3:
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
    if first.opname != "LOAD_FAST" or first.arg != 0:
        return None
    return code.co_names[super_attr.arg >> _LOAD_SUPER_NAME_SHIFT]


# -- a frame's variables by name ---------------------------------------------------------

# The loads of one of a frame's variables whose dis argval is its name.
VARIABLE_LOADS = frozenset(("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF"))
