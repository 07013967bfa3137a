def explode(depth):
    if depth == 0:
        raise ValueError("exploded in failing_mod")
    explode(depth - 1)
