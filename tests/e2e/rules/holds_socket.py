import socket

sock = socket.socket()
total = 0
for i in range(4):
    total += i  # [oom]
    print("i", i)
sock.close()
