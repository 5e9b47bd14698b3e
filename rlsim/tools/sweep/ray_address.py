"""Checking a `--ray-address` before Ray sees it: one line and exit 2 within seconds for every wrong one.

`ray.init(address=...)` given a malformed address raises deep inside Ray (a 60-80 line traceback);
given a well-formed address with nothing listening it retries the GCS for minutes. So the address is
parsed here (HOST:PORT, ray://HOST:PORT or `auto`; an empty one, an unset shell variable, is refused
rather than read as "start a local Ray"), the port probed with a plain TCP connect bounded by
PROBE_TIMEOUT_S, then asked whether it speaks HTTP/2, as a Ray GCS (gRPC) does: the client connection
preface (RFC 9113 §3.4) must be answered by a SETTINGS frame. An HTTP/1 server (a dashboard, a web
server) or a listener that does not answer is refused in one line naming what answered, before Ray is
involved. Only then `ray.init`, bounded by INIT_TIMEOUT_S, with Ray's own log lines (its C++ retries,
its SIGTERM-handler warning) kept off the terminal; a cluster started with token authentication (the
default of `ray start` since Ray 2.5x) is named as the cause when Ray refuses us. How to join such a
cluster: docs/reliability.md ("Ray clusters").
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from rlsim.tools.sweep.errors import SweepError

PROBE_TIMEOUT_S = 3.0  # connect; with the HTTP/2 check, a wrong address is refused within 5 s
ANSWER_TIMEOUT_S = 1.5  # a gRPC server answers the HTTP/2 preface at once
# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
INIT_TIMEOUT_S = 15.0  # probe + init stay well inside the 30 s a wrong address may take
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
FORMS = "HOST:PORT (the GCS address `ray start --head` prints, e.g. 10.0.0.1:6379), ray://HOST:PORT or auto"


FLAG = "--ray-address"  # the sweep's flag; `rlsim plan` passes its own (`--ray`), so each line names what was typed


def _flag(address: str, flag: str = FLAG) -> str:
    return f"{flag} {address}"


def parse_address(address: str, flag: str = FLAG) -> tuple[str, int] | None:
    """(host, port) to probe; None for `auto` (Ray finds the local cluster itself). SweepError if malformed."""
    text = address.strip()
    if not text:
        raise SweepError([f"{flag} {address!r}: empty (an unset shell variable?): not a Ray address; give "
                          f"{FORMS}, or leave the flag out to start a local Ray"])
    if text == "auto":
        return None
    if re.match(r"^https?://", text, re.I):
        raise SweepError([f"{_flag(address, flag)}: an HTTP URL is the dashboard / job-submission address; rlsim "
                          f"joins the cluster itself: give {FORMS}"])
    rest = text[len("ray://"):] if text.lower().startswith("ray://") else text
    host, sep, port_text = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536 or not _is_host(host):
        raise SweepError([f"{_flag(address, flag)}: not a Ray address: expected {FORMS}"])
    return host, int(port_text)


def _is_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOST.match(host))


def probe(address: str, timeout: float = PROBE_TIMEOUT_S, flag: str = FLAG) -> None:
    """A TCP connect to the address's port: nothing listening is one line now, not minutes of Ray retries."""
    target = parse_address(address, flag)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            answer = _speaks_http2(conn)
    except socket.gaierror:
        why = f"unknown host {host!r}"
    except TimeoutError:
        why = f"no answer from {host}:{port} within {timeout:g} s (a firewall, or the wrong host?)"
    except ConnectionRefusedError:
        why = f"nothing listening at {host}:{port} (is the head node up, `ray start --head`, and the port right?)"
    except OSError as exc:
        why = f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    else:
        if answer == "http2":
            return
        why = (f"an HTTP server answers at {host}:{port}, not a Ray GCS (the dashboard is usually port 8265; "
               "give the GCS port `ray start --head` printed, usually 6379)" if answer == "http" else
               f"something listens at {host}:{port} but does not speak gRPC as a Ray GCS does (another service?); "
               "give the GCS port `ray start --head` printed, usually 6379")
    raise SweepError([f"{_flag(address, flag)}: cannot reach a Ray cluster: {why}"])


def _speaks_http2(conn: socket.socket, timeout: float = ANSWER_TIMEOUT_S) -> str:
    """'http2' when the peer answers the HTTP/2 preface with a SETTINGS frame (a gRPC server: a Ray GCS or
    Ray Client), 'http' for an HTTP/1 reply, 'other' for silence or anything else. With TLS on
    (RAY_USE_TLS) the peer expects a handshake first: not judged ('http2')."""
    if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
        return "http2"
    try:
        conn.settimeout(timeout)
        conn.sendall(_H2_PREFACE)
        reply = conn.recv(64)
    except OSError:  # a timeout (silence) or a reset
        return "other"
    if len(reply) >= 9 and reply[3] == 4:  # frame header: 3 bytes length, type 4 = SETTINGS
        return "http2"
    return "http" if reply.startswith(b"HTTP/") else "other"


def init_error_line(address: str, exc: BaseException, flag: str = FLAG) -> str:
    """One line for an exception of ray.init(address=...), naming token authentication when it is the cause."""
    text = " ".join(str(exc).split())
    if type(exc).__name__ == "AuthenticationError" or "authentication" in text.lower() or "token" in text.lower():
        return (f"{_flag(address, flag)}: the cluster refused this client: it uses token authentication and no valid "
                "token was given (set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token>, or copy the head node's "
                "~/.ray/auth_token here; see docs/reliability.md)")
    return f"{_flag(address, flag)}: cannot join the Ray cluster: {text[:200] or type(exc).__name__}"


def bounded_init(init: Callable[[], Any], address: str, timeout: float = INIT_TIMEOUT_S, flag: str = FLAG) -> None:
    """Run `init` (ray.init) with a deadline: a port that answers but is not a Ray GCS must not hang a sweep."""
    outcome: dict[str, BaseException | None] = {}

    def target() -> None:
        try:
            init()
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            outcome["error"] = exc

    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # Ray's C++ retry warnings: not the user's problem
    quiet = _QuietStderr()
    thread = threading.Thread(target=target, name="ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    quiet.done(joined=not thread.is_alive() and outcome.get("error") is None)
    if thread.is_alive():
        auth = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
        raise SweepError([f"{_flag(address, flag)}: no Ray cluster let this client join within {timeout:g} s: " + (
            "check the token (RAY_AUTH_TOKEN or ~/.ray/auth_token must be the head node's), that this is the GCS "
            "port (usually 6379) and that the head runs the Ray version installed here" if auth else
            "the cluster probably uses token authentication (`ray start` turns it on by default), which this "
            "client is not set up for: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the head's token> (see "
            "docs/reliability.md); else check the GCS port (usually 6379) and the Ray version")])
    error = outcome.get("error")
    if error is not None:
        raise SweepError([init_error_line(address, error, flag)])


class _QuietStderr:
    """Ray's own lines while joining (C++ GCS retries, "SIGTERM handler is not set ...") go to a log file, not
    around rlsim's one-line refusal: file descriptor 2 is pointed at the file for the join. On success it is
    restored. On failure Ray's threads may still write, so it stays on the file and `sys.stderr` is moved to
    a copy of the terminal's descriptor for rlsim's own line (the process exits next)."""

    def __init__(self) -> None:
        import tempfile

        self.saved: int | None = None
        try:
            sys.stderr.flush()
            self.log = tempfile.NamedTemporaryFile(prefix="rlsim-ray-join-", suffix=".log", delete=False)
            self.saved = os.dup(2)
            os.dup2(self.log.fileno(), 2)
        except (OSError, ValueError):  # no file descriptor 2 to move (an embedded interpreter)
            self.saved = None

    def done(self, joined: bool) -> None:
        if self.saved is None:
            return
        if joined:
            os.dup2(self.saved, 2)
            os.close(self.saved)
            return
        try:
            real = sys.stderr.fileno() == 2
        except (OSError, ValueError, AttributeError):  # a captured stream (tests): it never wrote to fd 2
            real = False
        if real:
            sys.stderr = open(self.saved, "w", buffering=1, closefd=True)  # noqa: SIM115 - lives until exit
