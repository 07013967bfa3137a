"""input() with a prompt (written to stdout when stdin is not a terminal), then an
input() at end of file."""
name = input("Name: ")
age = input("Age: ")
print(f"hello {name}, {age}")
print("now at EOF")
input("More? ")
