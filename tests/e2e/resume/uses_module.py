# The loop mutates the state of a user module beside the script.
import statemod
from statemod import LOG, record

statemod.CONFIG["scale"] = 5
for i in range(6):  # [loop]
    n = i + 1  # [oom]
    record(n)
    print("recorded", n, statemod.COUNTER)
statemod.COUNTER += 100
print(statemod.COUNTER, LOG, statemod.get_log() is LOG, statemod.LOG is LOG)
print(statemod.CONFIG, record.__globals__ is vars(statemod))
