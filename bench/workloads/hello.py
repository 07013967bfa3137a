"""Start-up workload: the whole process is timed from outside."""
print("hello, world")
