"""Importable only from the target directory of the symbolic link."""
