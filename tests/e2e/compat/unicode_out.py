"""Non-ASCII text on stdout and stderr, and the encodings python chose."""
import sys

print("héllo wörld ✓ 日本語 🐍")
print("stderr: ünïcödé ✗", file=sys.stderr)
print(sys.stdout.encoding, sys.stderr.encoding, sys.stdout.errors, sys.stderr.errors)
print(sys.getfilesystemencoding(), sys.flags.utf8_mode)
sys.stdout.buffer.write("raw bytes: ß\n".encode("utf-8"))
print(ascii("日本"), "日本".encode())
