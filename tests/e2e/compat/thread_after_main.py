"""A non-daemon thread outlives the main code: python waits for it before atexit.
An exception in another thread goes through threading.excepthook."""
import atexit
import threading
import time

main_done = threading.Event()


def worker():
    main_done.wait()
    time.sleep(0.05)
    print("worker finishes after main", threading.current_thread().name)


def broken():
    raise ValueError("in a thread")


atexit.register(print, "atexit after the worker")
t = threading.Thread(target=worker, name="worker")
t.start()
b = threading.Thread(target=broken, name="broken")
b.start()
b.join()
print("main done, threads:", sorted(th.name for th in threading.enumerate()))
main_done.set()
