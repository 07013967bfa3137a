"""Started with SIGINT and SIGHUP ignored (nohup, `trap "" INT`): python keeps them
ignored and installs no KeyboardInterrupt handler."""
import signal
import sys
import time

for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
    print(sig.name, repr(signal.getsignal(sig)))
if sys.argv[1:] == ["wait"]:
    print("ready", flush=True)
    time.sleep(0.2)  # sent meanwhile, an ignored SIGINT interrupts nothing
    print("SIGINT was ignored")
