def work(n):
    data = []
    for i in range(n):
        data.append(bytearray(10))
        data.append(bytearray(20))
    return data


def main():
    try:
        work(10)
    except MemoryError:
        print("the program logs it and raises it again")
        raise


main()
