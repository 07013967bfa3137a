"""Reads all of piped stdin."""
import sys

data = sys.stdin.read()
print("read", len(data), "chars:", repr(data))
print("lines", data.splitlines())
print("eof again", repr(sys.stdin.read()))
