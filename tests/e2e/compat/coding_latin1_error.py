# -*- coding: latin-1 -*-
text = "café"
print(text)
raise ValueError(text + " ± résumé")
