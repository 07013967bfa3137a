"""The usual `if __name__ == '__main__': sys.exit(main())` entry point."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description="a small tool")
    parser.add_argument("--times", type=int, default=1)
    parser.add_argument("word")
    args = parser.parse_args(argv)
    for _ in range(args.times):
        print(args.word)
    return 0 if args.word != "fail" else 4


if __name__ == "__main__":
    sys.exit(main())
