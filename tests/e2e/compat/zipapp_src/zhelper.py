def fail_if(condition):
    if condition:
        raise RuntimeError("failure inside the zip application")
