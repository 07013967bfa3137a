"""A KeyboardInterrupt raised by the program itself: traceback, then python kills
itself with SIGINT so that the caller sees the interruption."""
import atexit


@atexit.register
def goodbye():
    print("atexit still runs")


def work():
    print("working")
    raise KeyboardInterrupt


work()
