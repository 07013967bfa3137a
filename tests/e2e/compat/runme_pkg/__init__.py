print("runme_pkg/__init__ imported as", __name__)
