"""_portal.state.logging_state: the logging configuration a program set up is saved with
it and set back on restore; a file handler goes on appending to the same file."""
import logging
import sys

import pytest

from _portal.state import logging_state, plugins
from _portal.checkpoint import reducers


def dump(obj):
    exact, inherited = plugins.reducers()
    return reducers.dumps({"x": obj}, reducers=exact, subclass_reducers=inherited, modules={})


def load(dumped):
    return reducers.loads(*dumped)["x"]


def roundtrip(obj):
    return load(dump(obj))


def saved_and_restored(clean_logging):
    """Capture, then restore into logging as a new process has it."""
    dumped = dump(logging_state.capture_process())
    clean_logging()
    assert logging.root.handlers == []
    logging_state.restore_process(load(dumped))


@pytest.fixture
def clean_logging():
    """The root logger and logger 'app' as a fresh process has them, before and after."""
    def reset():
        for lg in (logging.root, logging.getLogger("app")):
            for h in list(lg.handlers):
                lg.removeHandler(h)
                h.close()
            lg.filters[:] = []
            lg.propagate, lg.disabled = True, False
        logging.root.setLevel(logging.WARNING)
        logging.getLogger("app").setLevel(logging.NOTSET)
        logging.disable(logging.NOTSET)
    reset()
    yield reset
    reset()


class OnlyEven(logging.Filter):
    def filter(self, record):
        return record.args and record.args[0] % 2 == 0


def test_handlers_levels_and_formatters_come_back(tmp_path, clean_logging):
    path = tmp_path / "train.log"
    # force: pytest's own capture handlers are on the root logger already
    logging.basicConfig(filename=str(path), level=logging.INFO, force=True,
                        format="%(levelname)s:%(name)s %(message)s")
    app = logging.getLogger("app")
    app.setLevel(logging.DEBUG)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.ERROR)
    err.setFormatter(logging.Formatter("E %(message)s"))
    err.set_name("errors")
    app.addHandler(err)
    app.addFilter(OnlyEven())
    app.debug("step %d", 2)
    app.debug("step %d", 3)          # filtered out

    saved_and_restored(clean_logging)

    assert logging.root.level == logging.INFO and app.level == logging.DEBUG
    file_handler, = logging.root.handlers
    assert isinstance(file_handler, logging.FileHandler)
    assert file_handler.baseFilename == str(path) and file_handler.mode == "a"
    restored_err, = app.handlers
    assert restored_err.stream is sys.stderr and restored_err.level == logging.ERROR
    assert restored_err.formatter._fmt == "E %(message)s"
    assert logging._handlers.get("errors") is restored_err
    assert isinstance(app.filters[0], OnlyEven)
    app.debug("step %d", 4)
    app.debug("step %d", 5)
    file_handler.flush()
    assert path.read_text() == "DEBUG:app step 2\nDEBUG:app step 4\n"


def test_a_file_opened_for_writing_is_not_truncated(tmp_path, clean_logging):
    path = tmp_path / "w.log"
    h = logging.FileHandler(str(path), mode="w")
    logging.root.addHandler(h)
    logging.warning("one")
    saved_and_restored(clean_logging)
    logging.warning("two")
    logging.root.handlers[0].flush()
    assert path.read_text() == "one\ntwo\n"


def test_logging_disable_and_silent_loggers(clean_logging):
    logging.disable(logging.INFO)
    quiet = logging.getLogger("app")
    quiet.propagate = False
    quiet.disabled = True
    saved_and_restored(clean_logging)
    assert logging.root.manager.disable == logging.INFO
    assert quiet.propagate is False and quiet.disabled is True


def test_the_last_resort_handler_stays_the_library_s():
    assert roundtrip(logging.lastResort) is logging.lastResort
