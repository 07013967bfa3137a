# Each epoch opens an event log whose flush thread cannot be saved (a library's
# writer, eventlog.PlainEventLog): an error inside the epoch's loop cannot be
# resumed there, but the loop over the epochs, whose state does not hold the
# writer, can.
import eventlog


def run_epoch(epoch, results):
    events = eventlog.PlainEventLog(f"events-{epoch}.tsv")
    for i in range(4):
        results.append(epoch * 10 + i)
        events.add_scalar("item", i, epoch)
    events.close()


results = []
for epoch in range(3):
    run_epoch(epoch, results)
    print("epoch", epoch, "done")
print(results)
