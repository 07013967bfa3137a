"""Child interpreters started with sys.executable: captured and inherited output."""
import os
import subprocess
import sys

print("executable", sys.executable, flush=True)
out = subprocess.run([sys.executable, "-c", "import sys; print(sys.argv, sys.orig_argv)", "x"],
                     capture_output=True, text=True, check=True)
print("captured", out.stdout.strip())
here = os.path.dirname(os.path.abspath(__file__))
sys.stdout.flush()
rc = subprocess.call([sys.executable, os.path.join(here, "argv_show.py"), "--child"])
print("inherited child exit", rc)
rc = subprocess.call([sys.executable, "-c", "import sys; sys.exit('child failed')"])
print("failing child exit", rc)
