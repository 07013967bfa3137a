# A loop in a function called with positional arguments, inside print(...).
def mean_of_squares(values, offset):
    total = 0
    for k in range(len(values)):  # [loop]
        sq = (values[k] + offset) ** 2  # [oom]
        total += sq
        print("k", k, "sq", sq, "total", total)
    return total / len(values)


data = [3, 1, 4, 1, 5, 9, 2, 6]
print("mean", mean_of_squares(data, 2))
print("data", data)
