# A loop inside a coroutine run by asyncio: declined, with a true reason.
import asyncio


async def work():
    total = 0
    for i in range(4):
        total += i          # line 8: the fake OOM
        await asyncio.sleep(0)
    return total


print(asyncio.run(work()))
