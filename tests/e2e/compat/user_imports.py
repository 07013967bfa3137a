"""The user's own module and package beside the script import, from any cwd."""
import mymod
import mypkg
from mypkg import sub as pkg_sub
from mypkg.sub import greet

print(mymod.__name__, mymod.__file__, mymod.VALUE)
print(mypkg.__name__, mypkg.__file__, mypkg.__path__, mypkg.__package__)
print(pkg_sub.__name__, pkg_sub.__package__, greet("world"))
print(mymod.caller_name())
