import builtins

def hook_state():
    rescue = getattr(builtins, "__portal_rescue__", None)
    if rescue is None:
        return "no portal"
    frames = getattr(rescue, "__wrapped__", rescue).__self__.runtime.portal_modules["_portal._frames"]
    return f"hook installed: {frames.eval_hook_installed()}"

class Acc:
    def __init__(self):
        self.items = []
    def run(self, n, *, scale=1):
        for i in range(n):
            v = i * scale
            self.items.append(v)
            print("i", i, hook_state() if i in (0, 3) else "")
        return sum(self.items)

def outer(n):
    return Acc().run(n, scale=2)

print("total", outer(5))
