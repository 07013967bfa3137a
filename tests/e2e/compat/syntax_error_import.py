"""A SyntaxError in an imported module: reported from the import statement."""
print("before the import")
import bad_syntax_mod  # noqa: E402
