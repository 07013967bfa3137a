# The loop is in a recursive function, several frames of the same function deep.
class Node:
    def __init__(self, name, children=()):
        self.name = name
        self.children = list(children)


def make_tree(depth, prefix="n"):
    if depth == 0:
        return Node(prefix)
    return Node(prefix, [make_tree(depth - 1, f"{prefix}{k}") for k in range(2)])


visited = []


def walk(node, depth):
    visited.append(node.name)
    total = len(node.name)
    for child in node.children:  # [loop]
        label = "  " * depth + child.name  # [oom]
        print(label)
        total += walk(child, depth + 1)
    return total


tree = make_tree(3)
print("total", walk(tree, 0))
print("visited", visited)
