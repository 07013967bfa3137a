# A loop inside an `except` block: after the resume the exception being handled
# there is the same (sys.exception(), a bare raise, the __context__ of a new error).
import sys


def retry(items):
    seen = []
    try:
        raise KeyError("first attempt failed")
    except KeyError as e:
        for it in items:  # [f_loop]
            v = (it, repr(sys.exception()))  # [f_oom]
            seen.append(v)
            print("retry", v)
        try:
            raise ValueError("while handling")
        except ValueError as inner:
            print("context", repr(inner.__context__), inner.__context__ is e)
    print("after", repr(sys.exception()))
    return seen


if sys.argv[1] == "function":
    print(retry([1, 2, 3, 4]))
else:
    try:
        open("/nonexistent/portal/file")
    except OSError as err:
        for n in range(4):  # [loop]
            line = f"{n} {type(sys.exception()).__name__} {err.errno}"  # [oom]
            print(line)
        try:
            raise
        except OSError as again:
            print("bare raise re-raises it:", again is err)
    print("after", sys.exception())
