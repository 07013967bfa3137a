"""CRLF line endings."""
import sys
x = 1
print("crlf ok", x)
raise ValueError("from a CRLF file")
