# -*- coding: latin-1 -*-
"""A source file in Latin-1, declared by its coding cookie."""
text = "café à la crème"
print(text, len(text), ascii(text))
print(__doc__)
