"""What sys.settrace and sys.setprofile functions see of loops left by an
exception (and of one whose body calls .backward(), where Portal notes the
iteration's start): every event, its function, the frame's line (in a 'return'
event too: where the frame stopped) and argument, as python reports them."""
import sys

LOG = []


def tracer(frame, event, arg):
    if frame.f_code.co_filename != __file__:
        return tracer
    a = arg[0].__name__ if event == "exception" else (repr(arg) if event == "return" else "")
    LOG.append((event, frame.f_code.co_name, frame.f_lineno, a))
    return tracer


def profiler(frame, event, arg):
    name = getattr(arg, "__name__", "") if event.startswith("c_") else frame.f_code.co_name
    LOG.append(("P", event, name, frame.f_lineno))


def leave_for(n):
    total = 0
    for i in range(n):
        total += i
        if i == 2:
            raise ValueError(i)
    return total


def caught_inside(n):
    for i in range(n):
        try:
            if i == 1:
                raise KeyError(i)
        except KeyError:
            pass
    return n


def leave_while(n):
    i = 0
    while i < n:
        i += 1
        if i == 2:
            {}[i]
    return i


def nested(n):
    for i in range(n):
        for j in range(n):
            if j == 1:
                raise IndexError(j)


def callee_raises():
    raise OSError("x")


def through_call(n):
    for i in range(n):
        callee_raises()


def caught_same_frame(n):
    try:
        for i in range(n):
            x = 1 / (i - 1)
    except ZeroDivisionError:
        return "zero"


def ki(n):
    for i in range(n):
        raise KeyboardInterrupt


def gen(n):
    for i in range(n):
        yield i


def close_gen():
    g = gen(5)
    next(g)
    g.close()


def finally_in_loop(n):
    for i in range(n):
        try:
            if i == 1:
                raise RuntimeError
        finally:
            pass


def tight():
    items = range(0, 3)
    try:
        i = 0
        while 1: i = items[i] + 1
    except IndexError:
        pass


class Loss:
    def backward(self):
        pass


def training(n):
    for step in range(n):
        loss = Loss()
        loss.backward()
        if step == 1:
            raise MemoryError("fake")


def run(f, *a):
    try:
        f(*a)
    except BaseException as e:
        LOG.append(("caught", type(e).__name__))


CASES = [(leave_for, 5), (caught_inside, 3), (leave_while, 5), (nested, 3), (through_call, 2),
         (caught_same_frame, 3), (ki, 2), (close_gen,), (finally_in_loop, 3), (tight,),
         (training, 3)]
for hook in (sys.settrace, sys.setprofile):
    for case in CASES:
        LOG.clear()
        hook(tracer if hook is sys.settrace else profiler)
        run(*case)
        hook(None)
        print(hook.__name__, case[0].__name__)
        for e in LOG:
            print("   ", e)
