"""The __main__ module: __name__, __file__, its globals' keys, __loader__, __spec__,
and that sys.modules['__main__'] is this very namespace."""
import sys

x: int = 1


def show():
    print("name", __name__)
    print("file", __file__)
    print("keys", sorted(globals()))
    print("loader", type(__loader__), __loader__.name, __loader__.path)
    print("spec", __spec__, "package", repr(__package__), "cached", __cached__)
    print("doc", repr(__doc__))
    print("builtins", __builtins__)
    # the module's, as an attribute: 3.14 (PEP 649) no longer keeps a global
    # __annotations__ in the module's namespace, it computes them from __annotate__
    print("annotations", sys.modules[__name__].__annotations__)
    main = sys.modules["__main__"]
    print("main is me", main.__dict__ is globals(), main.__name__)
    print("loader source", __loader__.get_source("__main__").splitlines()[0])


if __name__ == "__main__":
    show()
