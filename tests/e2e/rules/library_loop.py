import io
import json

rows = [[i, i * i] for i in range(50)]
print("encoding")
out = io.StringIO()
json.dump(rows, out, indent=1)  # json's own loop (json.dump runs the Python encoder), called at the top level
text = out.getvalue()
print(len(text))
