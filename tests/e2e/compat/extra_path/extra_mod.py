WHERE = "found through PYTHONPATH"
