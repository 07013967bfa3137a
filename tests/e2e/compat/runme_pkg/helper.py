VALUE = "relative import works"
