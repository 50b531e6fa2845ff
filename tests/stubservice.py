"""A stand-in run service for the remote backend's tests: the job protocol of docs/service-api.md on loopback.

``http.server`` in a thread: ``POST /v1/runs`` and ``/v1/executions`` answer
``202`` with a job, ``GET /v1/jobs/<id>`` answers its state, as the contract
says. What a job computes is the test's: ``hosted.remote_kinds`` on real
Docker, or a canned answer. Knobs make it misbehave the ways a real service
(or a hostile one) can: refuse the token, be over quota, have no worker,
never finish, fail the job, or send an answer the test mangles.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

Answer = Callable[[str, Any], Any]  # (route, request body) -> the job's result


@dataclass
class StubService:
    answer: Answer
    token: str = "t0k3n-for-tests"
    refuse: Optional[int] = None  # answer every POST with this status (429, 503, 500...)
    started_polls: int = 1  # how many polls say "started" before the job is finished (after it is computed)
    never_finish: bool = False
    fail: Optional[dict[str, str]] = None  # the job fails with this error
    mangle: Callable[[Any], Any] = lambda result: result  # what the service does to the result before sending it
    redirect: Optional[str] = None  # answer every POST with a 303 to this URL (what urllib would follow)
    raw_job: Optional[Callable[[dict[str, Any]], Any]] = None  # replaces the whole job answer
    post_status: str = "queued"  # the status the 202 says ("finished": answered from the service's cache)
    unavailable_polls: int = 0  # how many polls are answered 503 (Redis restarting) before the job's state
    requests: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, body) as received
    headers: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                stub.headers.append(dict(self.headers.items()))
                if self.headers.get("Authorization") != f"Bearer {stub.token}":
                    self._send(401, {"error": {"code": "unauthorized", "message": "unknown token"}})
                    return False
                return True

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                stub.requests.append(("POST", self.path, body))
                if not self._authorized():
                    return
                if stub.redirect is not None:
                    self.send_response(303)
                    self.send_header("Location", stub.redirect)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if stub.refuse is not None:
                    code = {429: "rate_limited", 503: "unavailable"}.get(stub.refuse, "internal")
                    self._send(stub.refuse, {"error": {"code": code, "message": f"refused with {stub.refuse}", "limit": "30/min"}})
                    return
                if self.path not in ("/v1/runs", "/v1/executions"):
                    self._send(404, {"error": {"code": "not_found", "message": self.path}})
                    return
                job = stub._start(self.path, body)
                self._send(202, {"job": job, "status": stub.post_status, "url": f"/v1/jobs/{job}"})

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                stub.requests.append(("GET", self.path, None))
                if not self._authorized():
                    return
                if stub.unavailable_polls > 0:
                    stub.unavailable_polls -= 1
                    self._send(503, {"error": {"code": "unavailable", "message": "the service's job store (Redis) "
                                               "cannot be reached; try again later"}})
                    return
                job = self.path.removeprefix("/v1/jobs/")
                state = stub._state(job)
                if state is None:
                    self._send(404, {"error": {"code": "not_found", "message": f"no job {job}"}})
                    return
                self._send(200, state)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "StubService":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def _start(self, route: str, body: Any) -> str:
        with self._lock:
            job = f"job-{len(self._jobs) + 1}"
            record: dict[str, Any] = {"route": route, "done": threading.Event(), "result": None, "error": None, "polls": 0}
            self._jobs[job] = record

        def work() -> None:
            try:
                record["result"] = self.mangle(self.answer(route, body))
            except Exception as exc:  # noqa: BLE001 - a job that raises is a failed job, as a worker reports it
                record["error"] = {"code": "job_error", "message": f"{type(exc).__name__}: {exc}"}
            record["done"].set()

        threading.Thread(target=work, daemon=True).start()
        return job

    def _state(self, job: str) -> Optional[dict[str, Any]]:
        record = self._jobs.get(job)
        if record is None:
            return None
        kind = "run" if record["route"] == "/v1/runs" else "execution"
        state: dict[str, Any] = {"job": job, "status": "started", "kind": kind, "result": None, "error": None,
                                 "cached": False, "ran_at": "stub"}
        if self.never_finish or not record["done"].is_set():
            pass
        elif record["polls"] < self.started_polls:
            record["polls"] += 1
        elif self.fail is not None:
            state.update(status="failed", error=self.fail)
        elif record["error"] is not None:
            state.update(status="failed", error=record["error"])
        else:
            state.update(status="finished", result=record["result"])
        return self.raw_job(state) if self.raw_job is not None else state
