# Out of memory outside any loop: Portal declines, the job fails as under python.
def load(n):
    data = list(range(n))  # [fn_oom]
    return data


print("start")
table = load(5)  # [mod_oom]
for x in table:
    print(x)
