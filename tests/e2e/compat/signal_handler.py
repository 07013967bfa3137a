"""Handlers for the signals the supervisor forwards: each reports the signal it got
and exits with 10+signo."""
import signal
import sys
import time


def handler(signo, frame):
    print("got", signal.Signals(signo).name, "in", frame.f_code.co_name)
    sys.exit(10 + signo)


for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, handler)


def wait():
    print("ready", flush=True)
    time.sleep(60)


wait()
print("timed out waiting for the signal")
