"""What the pickler raises for an object it cannot save, and what a reducer of
a plug-in raises to refuse one (``Refuse``: the pickler names the object's path
in front of its reason)."""


class Unsaveable(Exception):
    """An object of the program state cannot be saved.

    ``str()`` is ``PATH (TYPE): REASON``, e.g.
    ``global 'sock' (socket.socket): cannot pickle 'socket' object``.
    """

    def __init__(self, path, type_name, reason):
        self.path = path
        self.type_name = type_name
        self.reason = reason
        super().__init__(path, type_name, reason)

    def __str__(self):
        return f"{self.path} ({self.type_name}): {self.reason}"


class DeclineLoop(Exception):
    """Raised by a reducer when the state at this loop cannot be saved faithfully
    but the state of an outer loop may be (a tensor whose autograd graph could
    still be back-propagated: autograd.py).  The pickler re-raises it with the
    object's path in front: ``PATH (TYPE): REASON``."""


class Refuse(Exception):
    """Raised by a reducer (the pickler's or a plug-in's) for an object it knows
    cannot be saved faithfully; the message says why, in lower case."""


def type_name(obj):
    t = type(obj)
    mod = getattr(t, "__module__", None)
    qual = getattr(t, "__qualname__", t.__name__)
    return qual if mod in (None, "builtins") else f"{mod}.{qual}"
