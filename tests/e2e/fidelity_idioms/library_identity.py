"""A hyper-parameter sweep that parses its settings inside the loop, as sweep
scripts do, holding library objects whose identity the libraries test with `is`:
argparse.SUPPRESS (a string: a suppressed option must stay out of the namespace
and out of the help), a library's module-level dict, tuple and sentinel, library
enum members.  Each line printed says whether each is still the library's own."""
import argparse
import dataclasses
import functools
import json
import logging
import signal

parser = argparse.ArgumentParser(prog="sweep")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--tag", default=argparse.SUPPRESS)          # absent unless given
parser.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
levels = logging._nameToLevel                                     # a library's module dict
assigned = functools.WRAPPER_ASSIGNMENTS                          # a library's tuple
missing = dataclasses.MISSING                                     # a library's sentinel
stop = signal.SIGTERM                                             # a library enum member
runs = [["--lr", "0.1"], ["--lr", "0.2", "--tag", "b"], ["--lr", "0.3"],
        ["--lr", "0.4", "--tag", "d"], ["--lr", "0.5"]]
results = []
for i, argv in enumerate(runs):
    ns = parser.parse_args(argv)
    settings = vars(ns)
    results.append(settings)
    print(i, json.dumps(settings, sort_keys=True),
          levels is logging._nameToLevel, assigned is functools.WRAPPER_ASSIGNMENTS,
          missing is dataclasses.MISSING, stop is signal.SIGTERM,
          parser._actions[2].default is argparse.SUPPRESS)
print(parser.format_help())
print(json.dumps(results, sort_keys=True))
