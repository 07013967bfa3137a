from . import __name__ as parent


def greet(who):
    return f"hello {who} from {parent}.sub"
