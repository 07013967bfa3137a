# A declined error reaches the program as under python: the frames inside the
# loop keep their locals.  The loop's state holds a live autograd graph (`total`
# summed across iterations for a later backward()), so the loop declines;
# the program's own `except` around it catches the error and prints a local of
# the innermost frame through the traceback; then sys.excepthook prints one too.
import sys

import torch


def forward(w, x):
    hidden = w * x
    marker = "inner frame local"
    if x[0] == 1:
        raise MemoryError("out of memory (raised by the program, the same under python)")
    return hidden.sum()


def train(w):
    total = torch.zeros(())
    for i in range(3):
        total = total + forward(w, torch.ones(4) * i)
    return total


w = torch.ones(4, requires_grad=True)
try:
    train(w)
except MemoryError as e:
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    print("caught:", tb.tb_frame.f_code.co_name, tb.tb_frame.f_locals["marker"],
          tb.tb_frame.f_locals["hidden"].tolist())


def hook(kind, value, tb):
    while tb.tb_next is not None:
        tb = tb.tb_next
    print("excepthook:", kind.__name__, sorted(tb.tb_frame.f_locals))


sys.excepthook = hook
train(w)
