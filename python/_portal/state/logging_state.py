"""Saving the `logging` configuration the program set up (a plug-in: plugins.MODULES).

`logging` is a library module: its state (the root logger's handlers and level,
every named logger's) is not saved with the program, and a resumed program does
not run its `logging.basicConfig(...)` again.  So the capture saves it as process
state: for the root logger and every logger whose configuration is not the
default (a level, handlers, filters, propagate off, disabled), its level,
propagate, disabled, handlers and filters; and `logging.disable()`'s level.

Handlers are saved by value, less their lock: a FileHandler's open stream is a
file that files.py re-opens without truncating, at its position (appending mode
stays appending), so the log goes on in the same file; a StreamHandler on
sys.stderr/stdout writes to the new process's.  A rebuilt handler goes through
logging.Handler.__init__ (a new lock, registered for logging.shutdown() to flush
and close at exit) before its attributes are set back; a named one is registered
under its name again.  Formatters and filters are plain objects.  Handlers that
hold what cannot be saved (a QueueHandler's queue, a socket) make the capture fail
naming them.
"""
import sys

_DEFAULT = {"level": 0, "propagate": True, "disabled": False}


def _configured(logger):
    return (logger.level != _DEFAULT["level"] or logger.propagate is not True or
            logger.disabled or logger.handlers or logger.filters)


def capture_process():
    logging = sys.modules.get("logging")
    if logging is None:
        return None
    loggers = {"": logging.root}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and _configured(logger):
            loggers[name] = logger
    return {"disable": logging.root.manager.disable,
            "loggers": {name: (lg.level, lg.propagate, lg.disabled, list(lg.handlers), list(lg.filters))
                        for name, lg in loggers.items()}}


def restore_process(saved):
    import logging
    logging.disable(saved["disable"])
    for name, (level, propagate, disabled, handlers, filters) in saved["loggers"].items():
        logger = logging.getLogger(name or None)
        logger.level, logger.propagate, logger.disabled = level, propagate, disabled
        logger.handlers[:] = handlers
        logger.filters[:] = filters
    logging.Logger.manager._clear_cache()


def _rb_handler(cls):
    import logging
    handler = cls.__new__(cls)
    logging.Handler.__init__(handler)  # its lock, and a place in logging.shutdown()'s list
    return handler


def _set_handler(handler, state):
    import logging
    handler.__dict__.update(state)
    if state.get("_name"):
        handler.set_name(state["_name"])  # registered by name, as dictConfig left it


def reduce_handler(handler):
    logging = sys.modules["logging"]
    if handler is logging.lastResort:
        return NotImplemented  # a global of the library: saved by reference
    state = {k: v for k, v in vars(handler).items() if k != "lock"}
    return (_rb_handler, (type(handler),), state, None, None, _set_handler)


def subclass_reducers(context):
    logging = sys.modules.get("logging")
    if logging is None:
        return {}
    return {logging.Handler: reduce_handler}
