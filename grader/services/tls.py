"""The simulated internet's TLS: a CA of its own per internet, and the certificates its servers present.

Run inside the services image beside ``internet.py`` (and on the host as
``grader.services.tls``). Standard library and the ``openssl`` command
only; it imports ``domains`` beside it, nothing of the services. Which name a
connection may be served under is the caller's decision, passed in as the SNI
callback.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from grader.protocol import domains
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import domains
    except ImportError:  # on the host: imported from the package
        from grader.protocol import domains

__all__ = ["CA_NAME", "Certs", "SniCallback"]

CA_NAME = "Sandbox Lab run CA"
# ssl's SNI callback: (the TLS socket, the name asked for, the context), an alert number or None to go on
SniCallback = Callable[[Any, Optional[str], ssl.SSLContext], Optional[int]]

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {ca_name}
# Extensions that strict verifiers (Python 3.13's VERIFY_X509_STRICT, Go, curl) require.
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
subjectAltName = {sans}
"""


class Certs:
    """The run's CA and the certificates its servers present: one leaf for the world's names, more minted on demand.

    A new CA per internet, whose key lives only in this process's private
    temporary directory (never in ``out_dir``, which others read): trusting it
    in one run's sandbox grants nothing anywhere else. The first leaf covers
    every listed name and one label under each zone. A name it does not cover
    (a name the world does not know, an IP address, a deeper name in a zone)
    gets a leaf of its own when a server answers for it, signed from the same
    request in one openssl call; at most ``MAX_MINTED`` are kept.
    """

    MAX_MINTED = 256

    def __init__(self, names: list[str], zones: list[str], workdir: str, sni_callback: SniCallback) -> None:
        self._dir = workdir
        self._sni_callback = sni_callback
        self._covered = set(names) | set(zones)
        self._zones = tuple(zones)
        self._lock = threading.Lock()
        self._minted: dict[str, ssl.SSLContext] = {}
        sans = sorted(self._covered) + [f"*.{zone}" for zone in sorted(set(zones))]
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-config", self._config(sans)]
        self._run(["openssl", "req", "-x509", *ec, "-keyout", self._p("ca.key"), "-out", self._p("ca.pem"),
                   "-days", "2", "-sha256", "-subj", f"/CN={CA_NAME}", "-extensions", "ca"])  # fmt: skip
        self._run(["openssl", "req", "-new", *ec, "-keyout", self._p("leaf.key"), "-out", self._p("leaf.csr"),
                   "-subj", "/CN=Sandbox Lab simulated internet"])  # fmt: skip
        self.base = self._sign("leaf", sans)
        with open(self._p("ca.pem"), "rb") as pem:
            self.ca_pem = pem.read()

    def _p(self, name: str) -> str:
        return os.path.join(self._dir, name)

    def _config(self, sans: list[str], name: str = "openssl") -> str:
        alt = ", ".join(f"IP:{n}" if domains.is_ipv4(n) else f"DNS:{n}" for n in sans)
        path = self._p(f"{name}.cnf")
        with open(path, "w", encoding="ascii") as f:
            f.write(_OPENSSL_CONFIG.format(ca_name=CA_NAME, sans=alt))
        return path

    @staticmethod
    def _run(step: list[str]) -> None:
        done = subprocess.run(step, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(step[:3])} failed: {done.stderr.strip()}")

    def _sign(self, stem: str, sans: list[str]) -> ssl.SSLContext:
        self._run(["openssl", "x509", "-req", "-in", self._p("leaf.csr"), "-CA", self._p("ca.pem"), "-CAkey", self._p("ca.key"),
                   "-set_serial", "0x" + os.urandom(16).hex(), "-days", "2", "-sha256",
                   "-extfile", self._config(sans, stem), "-extensions", "leaf", "-out", self._p(f"{stem}.pem")])  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._p(f"{stem}.pem"), self._p("leaf.key"))
        context.sni_callback = self._sni_callback
        for done in (f"{stem}.pem", f"{stem}.cnf"):  # loaded: only the keys and the request stay
            os.remove(self._p(done))
        return context

    def context_for(self, name: str | None) -> ssl.SSLContext:
        """A server context whose certificate covers ``name`` (the base one when it does already)."""
        if not name or name in self._covered or any(name.count(".") == z.count(".") + 1 and name.endswith("." + z) for z in self._zones):
            return self.base
        with self._lock:
            found = self._minted.get(name)
            if found is None:
                if len(self._minted) >= self.MAX_MINTED:
                    self._minted.pop(next(iter(self._minted)))  # the oldest goes
                found = self._minted[name] = self._sign(f"leaf-{len(self._minted)}-{os.urandom(4).hex()}", [name])
            return found
