"""Reading a checkpoint's stream back (reducers.py writes it): the prelude makes
the user modules, the body fills them and carries the state.  Every name of
Portal's own the stream references is looked up in the frozen vocabulary
(stream_words) and refused when it is not a word."""
import pickle
import sys
import types

from _portal.checkpoint import rebuild, stream_words
from _portal.checkpoint.rebuild import LIBRARY_REF, _rb_import, module_dict

ModuleType = types.ModuleType


class Loader(pickle.Unpickler):
    """Reads a stream written by ``Pickler.dump_state``.

    buffers      the out-of-band buffers, in order (memoryviews, mmap slices ...)
    recompiler   a ``codeindex.Recompiler`` (needed when the stream holds user code)
    main_module  the module whose dict receives ``__main__``'s globals (default:
                 ``sys.modules['__main__']``); other user modules are created anew
                 and registered in ``sys.modules``, replacing any.
    After ``load_state()``, ``modules`` maps each restored user module's name to it.
    """

    def __init__(self, file, *, buffers=None, recompiler=None, main_module=None):
        super().__init__(file, buffers=buffers)
        self.recompiler = recompiler
        self.main_module = main_module
        self.modules = {}
        self._library_refs = {}     # id(pid) -> (pid, object): a pid memoized in the stream

    def load_state(self):
        self.load()                     # prelude: creates the modules
        fills, state = self.load()      # body: the globals are set as it loads
        return state

    def persistent_load(self, pid):
        """A library global by reference (Pickler._library_ref)."""
        cached = self._library_refs.get(id(pid))
        if cached is not None and cached[0] is pid:
            return cached[1]
        if type(pid) is not tuple or len(pid) not in (3, 4) or pid[0] != LIBRARY_REF:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
        _, modname, key, *saved = pid
        try:
            obj = module_dict(_rb_import(modname))[key]
        except (ImportError, KeyError):
            if not saved:
                raise pickle.UnpicklingError(
                    f"library global {modname}.{key} is gone (it was saved by reference)") from None
            obj = saved[0]
        if saved:
            value = saved[0]
            try:
                same = type(obj) is type(value) and bool(obj == value)
            except Exception:               # an element's __eq__: the saved value
                same = False
            if not same:
                obj = value
        self._library_refs[id(pid)] = (pid, obj)
        return obj

    def find_class(self, module, name):
        if stream_words.is_portal(module):      # Portal's own: a declared word, or refused
            word = stream_words.resolve(module, name)
            if word is None:
                raise pickle.UnpicklingError(
                    f"the stream names {module}.{name}, which is not a word of this portal's "
                    f"checkpoint vocabulary (written by another version of portal?)")
            module, name = word
        if module == rebuild.__name__ and name in rebuild.CTX_NAMES:
            return getattr(self, name)
        if module in self.modules:
            try:
                return getattr(self.modules[module], name)
            except AttributeError:
                raise pickle.UnpicklingError(
                    f"{module}.{name} is referenced by name before it is restored") from None
        return super().find_class(module, name)

    def _module(self, name):
        mod = self.modules.get(name)
        if mod is None:
            if name == "__main__":
                mod = self.main_module if self.main_module is not None else sys.modules["__main__"]
            else:
                mod = ModuleType(name)
                sys.modules[name] = mod
            mod.__dict__.clear()
            self.modules[name] = mod
        return mod

    def _ctx_module_dict(self, name):
        return self._module(name).__dict__

    def _ctx_module(self, name):
        return self._module(name)

    def _ctx_code(self, filename, path, sha256):
        if self.recompiler is None:
            raise pickle.UnpicklingError(f"code of {filename!r} needs a recompiler")
        return self.recompiler.code_for(filename, path, sha256)

