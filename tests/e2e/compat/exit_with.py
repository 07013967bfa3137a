"""Ways to leave: sys.exit(n), sys.exit("msg"), sys.exit(None), raise SystemExit(n),
the exit() builtin, codes beyond 255 and negative ones; argv[1] picks one."""
import sys

how, value = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
print("leaving by", how, value)
sys.stdout.write("pending output without newline")
if how == "int":
    sys.exit(int(value))
elif how == "str":
    sys.exit(value)
elif how == "none":
    sys.exit(None)
elif how == "raise":
    raise SystemExit(int(value))
elif how == "builtin":
    exit(int(value))
elif how == "object":
    sys.exit(["not", "an", "int"])
elif how == "nested":
    def deep():
        try:
            sys.exit(int(value))
        finally:
            print("\nfinally runs")
    deep()
print("not reached")
