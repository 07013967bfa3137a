"""Chained exceptions (explicit `from`, implicit context, suppressed context), notes
and an exception group: the whole report as python prints it."""


class AppError(Exception):
    pass


def parse(text):
    try:
        return int(text)
    except ValueError as exc:
        raise AppError(f"bad number {text!r}") from exc


def load():
    try:
        parse("x1")
    except AppError:
        try:
            {}["k"]
        except KeyError as exc:
            exc.add_note("while loading the configuration")
            raise ExceptionGroup("load failed", [exc, RuntimeError("second")])


try:
    1 / 0
except ZeroDivisionError:
    try:
        raise LookupError("hidden") from None
    except LookupError:
        pass
    load()
