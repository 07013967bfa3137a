"""CPython 3.11's bytecode, as the bytecode layer needs it: one table per fact.

Only `tables.py` imports this module (on 3.11); everything else reads the facts
through `tables.T`.  Checked against 3.11's own `dis` on the stdlib
(tests/unit/python/test_codemap.py).
"""
import opcode

VERSION = (3, 11)

OPNAME = tuple(opcode.opname)
OPMAP = dict(opcode.opmap)
EXTENDED_ARG = opcode.EXTENDED_ARG
# Opcodes that take their argument byte (3.11: every opcode from HAVE_ARGUMENT on).
HAS_ARG = frozenset(range(opcode.HAVE_ARGUMENT, 256))
# Inline CACHE entries after each opcode (2 bytes each), indexed by opcode.
CACHES = tuple(opcode._inline_cache_entries)
HASJREL = frozenset(opcode.hasjrel)
HASJABS = frozenset(opcode.hasjabs)     # none in 3.11; kept for completeness
BACKWARD = frozenset(op for op in opcode.hasjrel if "JUMP_BACKWARD" in OPNAME[op])
# Instructions with a jump target that never jump there (3.14's END_ASYNC_FOR): none.
NOT_JUMPS = frozenset()
UNCONDITIONAL = frozenset(OPMAP[n] for n in (
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
TERMINAL = frozenset(OPMAP[n] for n in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE"))

# CO_MAXBLOCKS (Include/cpython/code.h in 3.11): static block nesting per code
# object; measured: 20 nested for loops compile, 21 do not.
MAX_BLOCKS = 20

# Blocks a generator's or coroutine's body starts under (3.11: none).
GENERATOR_BLOCKS = 0

# 3.11's generator close() always throws GeneratorExit into a suspended frame: its
# RESUME after a yield has no mark for a yield outside any try block (v313.py).
RESUME_AFTER_YIELD = 1
RESUME_DEPTH1 = None


def jump_target(op_offset: int, end: int, op: int, arg: int) -> int:
    """Byte offset a relative jump goes to: 3.11 counts from the instruction after
    the opcode (no jump has caches in 3.11)."""
    if op in BACKWARD:
        return op_offset + 2 - 2 * arg
    return op_offset + 2 + 2 * arg


_RETURN_GENERATOR = OPMAP["RETURN_GENERATOR"]


def stack_effect(op: int, arg, jumped: bool) -> int:
    if op == _RETURN_GENERATOR:
        # The frame returns the generator; when it is first resumed,
        # gen_send_ex pushes the sent value (None), which POP_TOP drops.
        return 1
    return opcode.stack_effect(op, arg if op in HAS_ARG else None, jump=jumped)


# How many stack items an instruction consumes (or replaces), where it is not
# the plain `-stack_effect`.  Fixed counts by name; variable ones in pops().
FIXED_POPS = {
    "POP_TOP": 1, "PUSH_NULL": 0, "NOP": 0, "UNARY_POSITIVE": 1,
    "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1, "BINARY_SUBSCR": 2,
    "GET_LEN": 0, "MATCH_MAPPING": 0, "MATCH_SEQUENCE": 0, "MATCH_KEYS": 0,
    "CHECK_EXC_MATCH": 1, "CHECK_EG_MATCH": 2, "WITH_EXCEPT_START": 0,
    "GET_AITER": 1, "GET_ANEXT": 0, "BEFORE_ASYNC_WITH": 1, "BEFORE_WITH": 1,
    "END_ASYNC_FOR": 2, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "GET_ITER": 1,
    "GET_YIELD_FROM_ITER": 1, "PRINT_EXPR": 1, "LOAD_BUILD_CLASS": 0,
    "LOAD_ASSERTION_ERROR": 0, "RETURN_GENERATOR": 0, "LIST_TO_TUPLE": 1,
    "RETURN_VALUE": 1, "IMPORT_STAR": 1, "SETUP_ANNOTATIONS": 0, "YIELD_VALUE": 1,
    "ASYNC_GEN_WRAP": 1, "PREP_RERAISE_STAR": 2, "POP_EXCEPT": 1, "STORE_NAME": 1,
    "DELETE_NAME": 0, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "STORE_ATTR": 2,
    "DELETE_ATTR": 1, "STORE_GLOBAL": 1, "DELETE_GLOBAL": 0, "LOAD_CONST": 0,
    "LOAD_NAME": 0, "LOAD_ATTR": 1, "COMPARE_OP": 2, "IMPORT_NAME": 2,
    "IMPORT_FROM": 0, "JUMP_FORWARD": 0, "POP_JUMP_FORWARD_IF_FALSE": 1,
    "POP_JUMP_FORWARD_IF_TRUE": 1, "LOAD_GLOBAL": 0, "IS_OP": 2, "CONTAINS_OP": 2,
    "BINARY_OP": 2, "LOAD_FAST": 0, "STORE_FAST": 1, "DELETE_FAST": 0,
    "POP_JUMP_FORWARD_IF_NOT_NONE": 1, "POP_JUMP_FORWARD_IF_NONE": 1,
    "GET_AWAITABLE": 1, "JUMP_BACKWARD_NO_INTERRUPT": 0, "MAKE_CELL": 0,
    "LOAD_CLOSURE": 0, "LOAD_DEREF": 0, "STORE_DEREF": 1, "DELETE_DEREF": 0,
    "JUMP_BACKWARD": 0, "LIST_APPEND": 1, "SET_ADD": 1, "MAP_ADD": 2,
    "LOAD_CLASSDEREF": 0, "COPY_FREE_VARS": 0, "RESUME": 0, "MATCH_CLASS": 3,
    "LOAD_METHOD": 1, "LIST_EXTEND": 1, "SET_UPDATE": 1, "DICT_MERGE": 1,
    "DICT_UPDATE": 1, "CALL": 2, "KW_NAMES": 0,
    "POP_JUMP_BACKWARD_IF_NOT_NONE": 1, "POP_JUMP_BACKWARD_IF_NONE": 1,
    "POP_JUMP_BACKWARD_IF_FALSE": 1, "POP_JUMP_BACKWARD_IF_TRUE": 1,
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
    if name == "BUILD_CONST_KEY_MAP":
        return arg + 1
    if name == "MAKE_FUNCTION":
        return 1 + bin(arg & 0xF).count("1")
    if name == "FORMAT_VALUE":
        return 2 if (arg & 4) else 1
    if name == "CALL_FUNCTION_EX":
        return 3 + (arg & 1)
    if name == "PRECALL":
        return arg + 2
    if name == "FOR_ITER":
        return 1 if jumped else 0
    if name == "JUMP_IF_FALSE_OR_POP" or name == "JUMP_IF_TRUE_OR_POP":
        return 0 if jumped else 1
    if name == "SEND":
        return 2 if jumped else 1
    if name == "RERAISE":
        return 1
    return None


# What some instructions push, as far as it matters to resuming (stack.py).
PUSH_KINDS = {
    "GET_ITER": ("iter",),
    "GET_AITER": ("aiter",),
    "BEFORE_WITH": ("exit", "unknown"),
    "BEFORE_ASYNC_WITH": ("exit", "unknown"),
}

# -- fast locals (liveness) ----------------------------------------------------

_LOAD_FAST = OPMAP["LOAD_FAST"]
_STORE_FAST = OPMAP["STORE_FAST"]
_DELETE_FAST = OPMAP["DELETE_FAST"]
_NONE = ((), ())


def fast_uses_defs(op: int, arg):
    """(slots read, slots written) of fast locals by one instruction.
    DELETE_FAST raises if unbound: its variable's state is read."""
    if op == _LOAD_FAST or op == _DELETE_FAST:
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
        return ins.arg, False
    if ins.opname == "LOAD_METHOD":
        return ins.arg, True
    return None


# -- the call protocol -------------------------------------------------------------
#
# 3.11: [NULL, callable] or [method, self], then the arguments; PRECALL n, CALL n;
# keyword names set by KW_NAMES (kept in a C local of the interpreter) before PRECALL.
CALL_PROTOCOL = "precall"
# Instructions between the LOADs of a call's arguments and its result.
CALL_SEQUENCE = ("PRECALL", "CALL")


def reenter_operands(reenter, null):
    """The two slots below a call's arguments that make the call call `reenter`."""
    return [null, reenter]


def callable_of(operands, null, kind):
    """The object a call calls, from its two slots below the arguments."""
    if operands[0] is not null and kind == "call":
        return operands[0]          # [method, self]
    return operands[1]              # [NULL, callable]; call_ex: [NULL, callable]


# -- constants -------------------------------------------------------------------------

_LOAD_CONST = OPMAP["LOAD_CONST"]
CONSTANT_LOADS = frozenset(("LOAD_CONST",))
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
JUMP_IF_FALSE = "POP_JUMP_FORWARD_IF_FALSE"

# -- with statements -----------------------------------------------------------------

# The handler of a with statement, from its first instruction; the last one is the
# jump taken when __exit__ returns true.
WITH_HANDLER = ("PUSH_EXC_INFO", "WITH_EXCEPT_START", "POP_JUMP_FORWARD_IF_TRUE")


def super_method_call(code, instrs, k):
    """NAME when instrs[:k] ends with a call `super().NAME(a, b, ...)` of the builtin
    name `super` with no arguments, the method's arguments plain fast locals; else
    None.  3.11: LOAD_GLOBAL (NULL + super), PRECALL 0, CALL 0, LOAD_METHOD NAME,
    LOAD_FAST each argument, PRECALL n, CALL n (super() finds __class__ and the first
    argument in the frame)."""
    if k < 2 or instrs[k - 1].opname != "CALL" or instrs[k - 2].opname != "PRECALL":
        return None
    nargs = instrs[k - 2].arg
    j = k - 3
    for _ in range(nargs):
        if j < 0 or instrs[j].opname != "LOAD_FAST":
            return None
        j -= 1
    if j < 3 or instrs[j].opname != "LOAD_METHOD":
        return None
    call0, pre0, load = instrs[j - 1], instrs[j - 2], instrs[j - 3]
    if call0.opname != "CALL" or call0.arg != 0 or pre0.opname != "PRECALL" or pre0.arg != 0:
        return None
    if load.opname != "LOAD_GLOBAL" or not global_pushes_null(load.arg) \
            or code.co_names[global_name(load.arg)] != "super":
        return None
    return code.co_names[instrs[j].arg]


# -- a frame's variables by name ---------------------------------------------------------

# The loads of one of a frame's variables whose dis argval is its name (or, for
# one instruction loading two, the tuple of both).
VARIABLE_LOADS = frozenset(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF"))
