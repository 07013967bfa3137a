"""nomain_dir has no __main__.py: python refuses to run the directory."""
