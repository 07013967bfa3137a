import json

rows = [[i, i * i] for i in range(50)]
print("encoding")
text = json.dumps(rows, indent=1)  # json's own loop, called at the top level
print(len(text))
