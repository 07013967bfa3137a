def more(items):
    return len(items) < 5


items = []
while more(items):
    items.append(len(items))
print(items)
