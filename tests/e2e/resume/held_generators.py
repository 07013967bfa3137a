# Generators held in variables across the suspension: created and not started,
# suspended at a yield (inside a loop of the generator, too), finished.
def numbers(start):
    n = start
    while True:  # [gen_loop]
        got = yield n
        n += got if got else 1


def letters(word):
    for ch in word:  # [letters_loop]
        yield ch.upper()


pending_global = letters("global")  # created, not started


def main():
    pending = letters("resume")  # created, not started
    counter = numbers(100)
    print("first", next(counter))  # suspended at its yield
    half = letters("generators")
    print("half", next(half), next(half))  # suspended inside its for loop
    done = letters("ab")
    print("done", list(done))  # finished
    collected = []
    for step in range(6):  # [loop]
        value = counter.send(step)  # [oom]
        collected.append(value)
        print("step", step, value)
    print("collected", collected)
    print("pending", list(pending), list(pending_global))
    print("half", "".join(half))
    print("done", list(done))
    print("counter", next(counter), counter.send(5))


main()
