# Nested loops: the innermost loop the error passes through is the one resumed.
import sys


def scan(matrix):
    found = []
    for r, row in enumerate(matrix):  # [f_outer]
        c = 0
        while c < len(row):  # [f_inner]
            v = row[c]  # [f_oom]
            if v % 2:
                found.append((r, c, v))
            c += 1
        print("scanned row", r, len(found))
    return found


if sys.argv[1] == "module":
    grid = []
    for row in range(4):  # [outer]
        line = []
        for col in "abc":  # [inner]
            cell = f"{col}{row}"  # [oom]
            line.append(cell)
        grid.append(line)
        print("row", row, line)
    print(grid)
else:
    print(scan([[1, 2, 3], [4, 5], [7, 9, 11, 12], [13]]))
