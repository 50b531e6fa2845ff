"""What runs inside the containers: the probe runner (sandbox image), and the simulated internet, its nameserver
and the egress proxy (services image). In the image they are flat scripts beside protocol/'s files; on the host
they import the same files from the package. They import the standard library, dnslib and h11 (Debian packages in
the image) and ``grader.protocol``, nothing else of the package."""

# the sandbox's own scripts, beside protocol/'s files in the sandbox image and in srt's copy
RUNNER_SCRIPTS = ("probe_runner.py", "runner_http.py")
