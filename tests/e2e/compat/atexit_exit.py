"""sys.exit() inside an atexit handler: reported as ignored, other handlers still
run, the exit status stays that of the program."""
import atexit
import sys


class Handler:
    def __init__(self, name, code):
        self.name, self.code = name, code

    def __call__(self):
        print("handler", self.name)
        if self.code is not None:
            sys.exit(self.code)

    def __repr__(self):  # python prints the handler's repr; keep it free of addresses
        return f"<Handler {self.name}>"


atexit.register(Handler("runs last", None))
atexit.register(Handler("exits", 9))
atexit.register(Handler("runs first", None))
print("main done")
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
