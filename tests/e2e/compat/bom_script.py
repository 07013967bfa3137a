"""A UTF-8 source file that starts with a byte order mark."""
print("BOM script: été", __doc__)
import sys
print(open(__file__, "rb").read(3))
