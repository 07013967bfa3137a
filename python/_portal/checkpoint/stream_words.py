"""The checkpoint stream's vocabulary: every name of Portal's own that a
`state.pickle` may reference, frozen.

A checkpoint's pickle stream names Portal's rebuild functions and classes
(GLOBAL / STACK_GLOBAL: a module and a qualified name) beside the program's and
its libraries' own.  A suspended job may wait weeks for its resume, on a newer
Portal: a word the stream uses that the package no longer has would break every
job suspended before the change.  So the words are declared here, and nowhere
else decides them:

* ``WORDS``: every (module, name) of Portal's own a stream may reference.  A word
  is never removed while a supported format version may hold it; a rebuild
  function's arguments keep their meaning (a new argument is optional).
* ``ALIASES``: (old module, old name) -> (module, name), one line per rename or
  move of a word.  An alias is never removed.

The loader resolves every ``_portal`` name through this table and refuses any
other by name (loader.Loader.find_class): a checkpoint is data, and Portal
never lets it call a function of its own that is not a rebuild function.

Checked by tests/unit/python/test_stream_words.py: every word resolves, no alias
hides a word, and the names read (pickletools) out of real checkpoints, written
by this build and by the previous format versions (fixtures), are all words;
tests/e2e/test_stream_words.py reads them out of checkpoints portal-run wrote.

Grammar of a name in the stream (pickle protocol 5): ``GLOBAL module\\nname\\n``
or two strings then ``STACK_GLOBAL``; Portal's words have a module under
``_portal`` and a name without dots.
"""

import collections
import io

PACKAGE = "_portal"

WORDS = frozenset({
    # The program's state: what a checkpoint's stream is made of (checkpoint/program.py).
    ("_portal.checkpoint.program", "ProgramState"),
    ("_portal.checkpoint.program", "ProcessState"),
    ("_portal.checkpoint.program", "FrameState"),
    ("_portal.checkpoint.program", "CallInfo"),
    ("_portal.checkpoint.program", "LoopInfo"),
    ("_portal.checkpoint.program", "EMPTY"),
    # The import hook's loader, held by the user's modules (__loader__, __spec__).
    ("_portal.run.importhook", "PortalLoader"),
    # The pickler's own rebuild functions (rebuild.py): code, functions, classes,
    # modules, globals.
    ("_portal.checkpoint.rebuild", "_ctx_code"),
    ("_portal.checkpoint.rebuild", "_ctx_module"),
    ("_portal.checkpoint.rebuild", "_ctx_module_dict"),
    ("_portal.checkpoint.rebuild", "_fill_module"),
    ("_portal.checkpoint.rebuild", "_rb_cached_property"),
    ("_portal.checkpoint.rebuild", "_rb_cell"),
    ("_portal.checkpoint.rebuild", "_rb_class"),
    ("_portal.checkpoint.rebuild", "_rb_dead_weakref"),
    ("_portal.checkpoint.rebuild", "_rb_descriptor"),
    ("_portal.checkpoint.rebuild", "_rb_detached_module"),
    ("_portal.checkpoint.rebuild", "_rb_dict_iter"),
    ("_portal.checkpoint.rebuild", "_rb_dict_view"),
    ("_portal.checkpoint.rebuild", "_rb_enum_member"),
    ("_portal.checkpoint.rebuild", "_rb_function"),
    ("_portal.checkpoint.rebuild", "_rb_global_attr"),
    ("_portal.checkpoint.rebuild", "_rb_import"),
    ("_portal.checkpoint.rebuild", "_rb_library_dict"),
    ("_portal.checkpoint.rebuild", "_rb_lru_cache"),
    ("_portal.checkpoint.rebuild", "_rb_mappingproxy"),
    ("_portal.checkpoint.rebuild", "_rb_memmap"),
    ("_portal.checkpoint.rebuild", "_rb_memmap_view"),
    ("_portal.checkpoint.rebuild", "_rb_method"),
    ("_portal.checkpoint.rebuild", "_rb_ndarray"),
    ("_portal.checkpoint.rebuild", "_rb_ndview"),
    ("_portal.checkpoint.rebuild", "_rb_np_global_random"),
    ("_portal.checkpoint.rebuild", "_rb_property"),
    ("_portal.checkpoint.rebuild", "_rb_random_global"),
    ("_portal.checkpoint.rebuild", "_rb_system_random"),
    ("_portal.checkpoint.rebuild", "_rb_typevar"),
    ("_portal.checkpoint.rebuild", "_rb_weakref"),
    ("_portal.checkpoint.rebuild", "_set_cell"),
    ("_portal.checkpoint.rebuild", "_set_class_state"),
    ("_portal.checkpoint.rebuild", "_set_dict"),
    ("_portal.checkpoint.rebuild", "_set_function_state"),
    ("_portal.checkpoint.rebuild", "_set_global"),
    ("_portal.checkpoint.rebuild", "_set_module_class"),
    # The plug-ins (one block each).
    ("_portal.state.csv_state", "_rb_reader"),
    ("_portal.state.csv_state", "_rb_writer"),
    ("_portal.torch.dataloader", "_fill_later"),
    ("_portal.torch.dataloader", "_rb_shell"),
    ("_portal.state.files", "_rb_file"),
    ("_portal.state.files", "_rb_std"),
    ("_portal.state.generators", "_rb_finished_generator"),
    ("_portal.state.generators", "_rb_finished_of_code"),
    ("_portal.state.generators", "_rb_fresh_generator"),
    ("_portal.state.generators", "_rb_generator"),
    ("_portal.state.itertools_state", "_rb_chain"),
    ("_portal.state.itertools_state", "_rb_cycle"),
    ("_portal.state.itertools_state", "_rb_islice"),
    ("_portal.state.itertools_state", "_rb_product"),
    ("_portal.state.logging_state", "_rb_handler"),
    ("_portal.state.logging_state", "_set_handler"),
    ("_portal.state.sqlite_state", "_rb_closed_connection"),
    ("_portal.state.sqlite_state", "_rb_connection"),
    ("_portal.state.sqlite_state", "_rb_cursor"),
    ("_portal.state.sqlite_state", "_rb_memory_connection"),
    ("_portal.state.threading_state", "_rb_condition"),
    ("_portal.state.threading_state", "_rb_lock"),
    ("_portal.state.threading_state", "_rb_main_thread"),
    ("_portal.state.threading_state", "_rb_rlock"),
    ("_portal.state.threading_state", "_rb_thread"),
    ("_portal.torch.objects", "_rb_cuda_default_generator"),
    ("_portal.torch.objects", "_rb_default_generator"),
    ("_portal.torch.objects", "_rb_device_storage"),
    ("_portal.torch.objects", "_rb_generator"),
    ("_portal.torch.objects", "_rb_meta"),
    ("_portal.torch.objects", "_rb_object"),
    ("_portal.torch.objects", "_rb_sparse_coo"),
    ("_portal.torch.objects", "_rb_storage"),
    ("_portal.torch.objects", "_rb_tensor"),
    ("_portal.torch.objects", "_rb_view_of_leaf"),
    ("_portal.torch.objects", "_set_dict"),
    ("_portal.torch.objects", "_set_inference_mode"),
    ("_portal.torch.objects", "_set_optimizer_dict"),
    ("_portal.torch.objects", "_set_tensor_state"),
    ("_portal.state.tqdm_state", "_rb_bar"),
    ("_portal.state.tqdm_state", "_set_bar"),
})

# (old module, old name) -> (module, name): a renamed or moved word keeps its old
# spelling here, so that checkpoints written before the change still load.
ALIASES = {
    # The pickler's rebuild functions moved from reducers.py into rebuild.py (format
    # version 3 unchanged).
    ("_portal.checkpoint.reducers", "_ctx_code"): ("_portal.checkpoint.rebuild", "_ctx_code"),
    ("_portal.checkpoint.reducers", "_ctx_module"): ("_portal.checkpoint.rebuild", "_ctx_module"),
    ("_portal.checkpoint.reducers", "_ctx_module_dict"): ("_portal.checkpoint.rebuild", "_ctx_module_dict"),
    ("_portal.checkpoint.reducers", "_fill_module"): ("_portal.checkpoint.rebuild", "_fill_module"),
    ("_portal.checkpoint.reducers", "_rb_cached_property"): ("_portal.checkpoint.rebuild", "_rb_cached_property"),
    ("_portal.checkpoint.reducers", "_rb_cell"): ("_portal.checkpoint.rebuild", "_rb_cell"),
    ("_portal.checkpoint.reducers", "_rb_class"): ("_portal.checkpoint.rebuild", "_rb_class"),
    ("_portal.checkpoint.reducers", "_rb_dead_weakref"): ("_portal.checkpoint.rebuild", "_rb_dead_weakref"),
    ("_portal.checkpoint.reducers", "_rb_descriptor"): ("_portal.checkpoint.rebuild", "_rb_descriptor"),
    ("_portal.checkpoint.reducers", "_rb_detached_module"): ("_portal.checkpoint.rebuild", "_rb_detached_module"),
    ("_portal.checkpoint.reducers", "_rb_dict_iter"): ("_portal.checkpoint.rebuild", "_rb_dict_iter"),
    ("_portal.checkpoint.reducers", "_rb_dict_view"): ("_portal.checkpoint.rebuild", "_rb_dict_view"),
    ("_portal.checkpoint.reducers", "_rb_enum_member"): ("_portal.checkpoint.rebuild", "_rb_enum_member"),
    ("_portal.checkpoint.reducers", "_rb_function"): ("_portal.checkpoint.rebuild", "_rb_function"),
    ("_portal.checkpoint.reducers", "_rb_global_attr"): ("_portal.checkpoint.rebuild", "_rb_global_attr"),
    ("_portal.checkpoint.reducers", "_rb_import"): ("_portal.checkpoint.rebuild", "_rb_import"),
    ("_portal.checkpoint.reducers", "_rb_library_dict"): ("_portal.checkpoint.rebuild", "_rb_library_dict"),
    ("_portal.checkpoint.reducers", "_rb_lru_cache"): ("_portal.checkpoint.rebuild", "_rb_lru_cache"),
    ("_portal.checkpoint.reducers", "_rb_mappingproxy"): ("_portal.checkpoint.rebuild", "_rb_mappingproxy"),
    ("_portal.checkpoint.reducers", "_rb_memmap"): ("_portal.checkpoint.rebuild", "_rb_memmap"),
    ("_portal.checkpoint.reducers", "_rb_memmap_view"): ("_portal.checkpoint.rebuild", "_rb_memmap_view"),
    ("_portal.checkpoint.reducers", "_rb_method"): ("_portal.checkpoint.rebuild", "_rb_method"),
    ("_portal.checkpoint.reducers", "_rb_ndarray"): ("_portal.checkpoint.rebuild", "_rb_ndarray"),
    ("_portal.checkpoint.reducers", "_rb_ndview"): ("_portal.checkpoint.rebuild", "_rb_ndview"),
    ("_portal.checkpoint.reducers", "_rb_np_global_random"): ("_portal.checkpoint.rebuild", "_rb_np_global_random"),
    ("_portal.checkpoint.reducers", "_rb_property"): ("_portal.checkpoint.rebuild", "_rb_property"),
    ("_portal.checkpoint.reducers", "_rb_random_global"): ("_portal.checkpoint.rebuild", "_rb_random_global"),
    ("_portal.checkpoint.reducers", "_rb_system_random"): ("_portal.checkpoint.rebuild", "_rb_system_random"),
    ("_portal.checkpoint.reducers", "_rb_typevar"): ("_portal.checkpoint.rebuild", "_rb_typevar"),
    ("_portal.checkpoint.reducers", "_rb_weakref"): ("_portal.checkpoint.rebuild", "_rb_weakref"),
    ("_portal.checkpoint.reducers", "_set_cell"): ("_portal.checkpoint.rebuild", "_set_cell"),
    ("_portal.checkpoint.reducers", "_set_class_state"): ("_portal.checkpoint.rebuild", "_set_class_state"),
    ("_portal.checkpoint.reducers", "_set_dict"): ("_portal.checkpoint.rebuild", "_set_dict"),
    ("_portal.checkpoint.reducers", "_set_function_state"): ("_portal.checkpoint.rebuild", "_set_function_state"),
    ("_portal.checkpoint.reducers", "_set_global"): ("_portal.checkpoint.rebuild", "_set_global"),
    ("_portal.checkpoint.reducers", "_set_module_class"): ("_portal.checkpoint.rebuild", "_set_module_class"),
    # The package's modules moved into the folders of its pipeline (format version 3
    # unchanged): every word of the flat layout, as checkpoints of that layout name it.
    ("_portal.csv_state", "_rb_reader"): ("_portal.state.csv_state", "_rb_reader"),
    ("_portal.csv_state", "_rb_writer"): ("_portal.state.csv_state", "_rb_writer"),
    ("_portal.dataloader", "_fill_later"): ("_portal.torch.dataloader", "_fill_later"),
    ("_portal.dataloader", "_rb_shell"): ("_portal.torch.dataloader", "_rb_shell"),
    ("_portal.files", "_rb_file"): ("_portal.state.files", "_rb_file"),
    ("_portal.files", "_rb_std"): ("_portal.state.files", "_rb_std"),
    ("_portal.generators", "_rb_finished_generator"): ("_portal.state.generators", "_rb_finished_generator"),
    ("_portal.generators", "_rb_finished_of_code"): ("_portal.state.generators", "_rb_finished_of_code"),
    ("_portal.generators", "_rb_fresh_generator"): ("_portal.state.generators", "_rb_fresh_generator"),
    ("_portal.generators", "_rb_generator"): ("_portal.state.generators", "_rb_generator"),
    ("_portal.importhook", "PortalLoader"): ("_portal.run.importhook", "PortalLoader"),
    ("_portal.itertools_state", "_rb_chain"): ("_portal.state.itertools_state", "_rb_chain"),
    ("_portal.itertools_state", "_rb_cycle"): ("_portal.state.itertools_state", "_rb_cycle"),
    ("_portal.itertools_state", "_rb_islice"): ("_portal.state.itertools_state", "_rb_islice"),
    ("_portal.itertools_state", "_rb_product"): ("_portal.state.itertools_state", "_rb_product"),
    ("_portal.logging_state", "_rb_handler"): ("_portal.state.logging_state", "_rb_handler"),
    ("_portal.logging_state", "_set_handler"): ("_portal.state.logging_state", "_set_handler"),
    ("_portal.reducers", "_ctx_code"): ("_portal.checkpoint.rebuild", "_ctx_code"),
    ("_portal.reducers", "_ctx_module"): ("_portal.checkpoint.rebuild", "_ctx_module"),
    ("_portal.reducers", "_ctx_module_dict"): ("_portal.checkpoint.rebuild", "_ctx_module_dict"),
    ("_portal.reducers", "_fill_module"): ("_portal.checkpoint.rebuild", "_fill_module"),
    ("_portal.reducers", "_rb_cached_property"): ("_portal.checkpoint.rebuild", "_rb_cached_property"),
    ("_portal.reducers", "_rb_cell"): ("_portal.checkpoint.rebuild", "_rb_cell"),
    ("_portal.reducers", "_rb_class"): ("_portal.checkpoint.rebuild", "_rb_class"),
    ("_portal.reducers", "_rb_dead_weakref"): ("_portal.checkpoint.rebuild", "_rb_dead_weakref"),
    ("_portal.reducers", "_rb_descriptor"): ("_portal.checkpoint.rebuild", "_rb_descriptor"),
    ("_portal.reducers", "_rb_detached_module"): ("_portal.checkpoint.rebuild", "_rb_detached_module"),
    ("_portal.reducers", "_rb_dict_iter"): ("_portal.checkpoint.rebuild", "_rb_dict_iter"),
    ("_portal.reducers", "_rb_dict_view"): ("_portal.checkpoint.rebuild", "_rb_dict_view"),
    ("_portal.reducers", "_rb_enum_member"): ("_portal.checkpoint.rebuild", "_rb_enum_member"),
    ("_portal.reducers", "_rb_function"): ("_portal.checkpoint.rebuild", "_rb_function"),
    ("_portal.reducers", "_rb_global_attr"): ("_portal.checkpoint.rebuild", "_rb_global_attr"),
    ("_portal.reducers", "_rb_import"): ("_portal.checkpoint.rebuild", "_rb_import"),
    ("_portal.reducers", "_rb_library_dict"): ("_portal.checkpoint.rebuild", "_rb_library_dict"),
    ("_portal.reducers", "_rb_lru_cache"): ("_portal.checkpoint.rebuild", "_rb_lru_cache"),
    ("_portal.reducers", "_rb_mappingproxy"): ("_portal.checkpoint.rebuild", "_rb_mappingproxy"),
    ("_portal.reducers", "_rb_memmap"): ("_portal.checkpoint.rebuild", "_rb_memmap"),
    ("_portal.reducers", "_rb_memmap_view"): ("_portal.checkpoint.rebuild", "_rb_memmap_view"),
    ("_portal.reducers", "_rb_method"): ("_portal.checkpoint.rebuild", "_rb_method"),
    ("_portal.reducers", "_rb_ndarray"): ("_portal.checkpoint.rebuild", "_rb_ndarray"),
    ("_portal.reducers", "_rb_ndview"): ("_portal.checkpoint.rebuild", "_rb_ndview"),
    ("_portal.reducers", "_rb_np_global_random"): ("_portal.checkpoint.rebuild", "_rb_np_global_random"),
    ("_portal.reducers", "_rb_property"): ("_portal.checkpoint.rebuild", "_rb_property"),
    ("_portal.reducers", "_rb_random_global"): ("_portal.checkpoint.rebuild", "_rb_random_global"),
    ("_portal.reducers", "_rb_system_random"): ("_portal.checkpoint.rebuild", "_rb_system_random"),
    ("_portal.reducers", "_rb_typevar"): ("_portal.checkpoint.rebuild", "_rb_typevar"),
    ("_portal.reducers", "_rb_weakref"): ("_portal.checkpoint.rebuild", "_rb_weakref"),
    ("_portal.reducers", "_set_cell"): ("_portal.checkpoint.rebuild", "_set_cell"),
    ("_portal.reducers", "_set_class_state"): ("_portal.checkpoint.rebuild", "_set_class_state"),
    ("_portal.reducers", "_set_dict"): ("_portal.checkpoint.rebuild", "_set_dict"),
    ("_portal.reducers", "_set_function_state"): ("_portal.checkpoint.rebuild", "_set_function_state"),
    ("_portal.reducers", "_set_global"): ("_portal.checkpoint.rebuild", "_set_global"),
    ("_portal.reducers", "_set_module_class"): ("_portal.checkpoint.rebuild", "_set_module_class"),
    ("_portal.sqlite_state", "_rb_closed_connection"): ("_portal.state.sqlite_state", "_rb_closed_connection"),
    ("_portal.sqlite_state", "_rb_connection"): ("_portal.state.sqlite_state", "_rb_connection"),
    ("_portal.sqlite_state", "_rb_cursor"): ("_portal.state.sqlite_state", "_rb_cursor"),
    ("_portal.sqlite_state", "_rb_memory_connection"): ("_portal.state.sqlite_state", "_rb_memory_connection"),
    ("_portal.state", "CallInfo"): ("_portal.checkpoint.program", "CallInfo"),
    ("_portal.state", "EMPTY"): ("_portal.checkpoint.program", "EMPTY"),
    ("_portal.state", "FrameState"): ("_portal.checkpoint.program", "FrameState"),
    ("_portal.state", "LoopInfo"): ("_portal.checkpoint.program", "LoopInfo"),
    ("_portal.state", "ProcessState"): ("_portal.checkpoint.program", "ProcessState"),
    ("_portal.state", "ProgramState"): ("_portal.checkpoint.program", "ProgramState"),
    ("_portal.threading_state", "_rb_condition"): ("_portal.state.threading_state", "_rb_condition"),
    ("_portal.threading_state", "_rb_lock"): ("_portal.state.threading_state", "_rb_lock"),
    ("_portal.threading_state", "_rb_main_thread"): ("_portal.state.threading_state", "_rb_main_thread"),
    ("_portal.threading_state", "_rb_rlock"): ("_portal.state.threading_state", "_rb_rlock"),
    ("_portal.threading_state", "_rb_thread"): ("_portal.state.threading_state", "_rb_thread"),
    ("_portal.torch_state", "_rb_cuda_default_generator"): ("_portal.torch.objects", "_rb_cuda_default_generator"),
    ("_portal.torch_state", "_rb_default_generator"): ("_portal.torch.objects", "_rb_default_generator"),
    ("_portal.torch_state", "_rb_device_storage"): ("_portal.torch.objects", "_rb_device_storage"),
    ("_portal.torch_state", "_rb_generator"): ("_portal.torch.objects", "_rb_generator"),
    ("_portal.torch_state", "_rb_meta"): ("_portal.torch.objects", "_rb_meta"),
    ("_portal.torch_state", "_rb_object"): ("_portal.torch.objects", "_rb_object"),
    ("_portal.torch_state", "_rb_sparse_coo"): ("_portal.torch.objects", "_rb_sparse_coo"),
    ("_portal.torch_state", "_rb_storage"): ("_portal.torch.objects", "_rb_storage"),
    ("_portal.torch_state", "_rb_tensor"): ("_portal.torch.objects", "_rb_tensor"),
    ("_portal.torch_state", "_rb_view_of_leaf"): ("_portal.torch.objects", "_rb_view_of_leaf"),
    ("_portal.torch_state", "_set_dict"): ("_portal.torch.objects", "_set_dict"),
    ("_portal.torch_state", "_set_inference_mode"): ("_portal.torch.objects", "_set_inference_mode"),
    ("_portal.torch_state", "_set_optimizer_dict"): ("_portal.torch.objects", "_set_optimizer_dict"),
    ("_portal.torch_state", "_set_tensor_state"): ("_portal.torch.objects", "_set_tensor_state"),
    ("_portal.tqdm_state", "_rb_bar"): ("_portal.state.tqdm_state", "_rb_bar"),
    ("_portal.tqdm_state", "_set_bar"): ("_portal.state.tqdm_state", "_set_bar"),
}


def is_portal(module):
    """Whether a stream's module name is Portal's own (then the name must be a word)."""
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def resolve(module, name):
    """The (module, name) the loader imports for a Portal name of a stream, through
    the aliases; None when it is not a word (the loader refuses it)."""
    word = ALIASES.get((module, name), (module, name))
    return word if word in WORDS else None


def names_in(data):
    """Every (module, name) a pickle stream references by GLOBAL or STACK_GLOBAL,
    read with pickletools without loading anything (the vocabulary's tests, and
    anyone who asks what a checkpoint would call).  A checkpoint's stream is two
    pickles (prelude and body, reducers.py) sharing one memo: all are read."""
    import pickletools      # only the tests and inspect ask: not at every start-up
    names, memo, strings = set(), {}, collections.deque(maxlen=2)
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        pushed = None       # the value the last opcode pushed, when a string (else None)
        for op, arg, _ in pickletools.genops(stream):
            if op.name in _STRINGS:
                pushed = arg
            elif op.name in ("BINGET", "LONG_BINGET", "GET"):
                pushed = memo.get(int(arg))
            elif op.name == "MEMOIZE":
                memo[len(memo)] = pushed
                continue
            elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = pushed
                continue
            else:
                if op.name == "GLOBAL":
                    names.add(tuple(arg.split(" ", 1)))
                elif op.name == "STACK_GLOBAL":
                    if len(strings) < 2 or not all(isinstance(s, str) for s in strings):
                        raise ValueError("STACK_GLOBAL without its two strings")
                    names.add(tuple(strings))
                pushed = None
            strings.append(pushed)
    return names


_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
                      "SHORT_BINSTRING", "BINSTRING", "STRING"})
