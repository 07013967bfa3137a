print("never printed")


def f(:
    pass
