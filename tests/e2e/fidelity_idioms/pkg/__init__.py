"""A package whose training module is run as `python3 -m pkg.train`."""
