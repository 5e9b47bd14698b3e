"""Checking a `--ray-address` before Ray sees it: one line and exit 2 within seconds for every wrong one.

`ray.init(address=...)` given a malformed address raises deep inside Ray (a 60-80 line traceback);
given a well-formed address with nothing listening it retries the GCS for minutes. So the address is
parsed here (HOST:PORT, ray://HOST:PORT or `auto`), the port probed with a plain TCP connect bounded
by PROBE_TIMEOUT_S, and `ray.init` bounded by INIT_TIMEOUT_S; a cluster started with token
authentication (the default of `ray start` since Ray 2.5x) is named as the cause when Ray refuses us.
How to join such a cluster: docs/reliability.md ("Ray clusters").
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

from rlsim.tools.sweep.errors import SweepError

PROBE_TIMEOUT_S = 5.0
INIT_TIMEOUT_S = 15.0  # probe + init stay well inside the 30 s a wrong address may take
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
FORMS = "HOST:PORT (the GCS address `ray start --head` prints, e.g. 10.0.0.1:6379), ray://HOST:PORT or auto"


def _flag(address: str) -> str:
    return f"--ray-address {address}"


def parse_address(address: str) -> tuple[str, int] | None:
    """(host, port) to probe; None for `auto` (Ray finds the local cluster itself). SweepError if malformed."""
    text = address.strip()
    if text == "auto":
        return None
    if re.match(r"^https?://", text, re.I):
        raise SweepError([f"{_flag(address)}: an HTTP URL is the dashboard / job-submission address; a sweep joins "
                          f"the cluster itself: give {FORMS}"])
    rest = text[len("ray://"):] if text.lower().startswith("ray://") else text
    host, sep, port_text = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536 or not _is_host(host):
        raise SweepError([f"{_flag(address)}: not a Ray address: expected {FORMS}"])
    return host, int(port_text)


def _is_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOST.match(host))


def probe(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """A TCP connect to the address's port: nothing listening is one line now, not minutes of Ray retries."""
    target = parse_address(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except socket.gaierror:
        why = f"unknown host {host!r}"
    except TimeoutError:
        why = f"no answer from {host}:{port} within {timeout:g} s (a firewall, or the wrong host?)"
    except ConnectionRefusedError:
        why = f"nothing listening at {host}:{port} (is the head node up, `ray start --head`, and the port right?)"
    except OSError as exc:
        why = f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    raise SweepError([f"{_flag(address)}: cannot reach a Ray cluster: {why}"])


def init_error_line(address: str, exc: BaseException) -> str:
    """One line for an exception of ray.init(address=...), naming token authentication when it is the cause."""
    text = " ".join(str(exc).split())
    if type(exc).__name__ == "AuthenticationError" or "authentication" in text.lower() or "token" in text.lower():
        return (f"{_flag(address)}: the cluster refused this client: it uses token authentication and no valid "
                "token was given (set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token>, or copy the head node's "
                "~/.ray/auth_token here; see docs/reliability.md)")
    return f"{_flag(address)}: cannot join the Ray cluster: {text[:200] or type(exc).__name__}"


def bounded_init(init: Callable[[], Any], address: str, timeout: float = INIT_TIMEOUT_S) -> None:
    """Run `init` (ray.init) with a deadline: a port that answers but is not a Ray GCS must not hang a sweep."""
    outcome: dict[str, BaseException | None] = {}

    def target() -> None:
        try:
            init()
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            outcome["error"] = exc

    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # Ray's C++ retry warnings: not the user's problem
    thread = threading.Thread(target=target, name="ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        auth = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
        raise SweepError([f"{_flag(address)}: no Ray cluster let this client join within {timeout:g} s: " + (
            "check the token (RAY_AUTH_TOKEN or ~/.ray/auth_token must be the head node's), that this is the GCS "
            "port (usually 6379) and that the head runs the Ray version installed here" if auth else
            "the cluster probably uses token authentication (`ray start` turns it on by default), which this "
            "client is not set up for: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the head's token> (see "
            "docs/reliability.md); else check the GCS port (usually 6379) and the Ray version")])
    error = outcome.get("error")
    if error is not None:
        raise SweepError([init_error_line(address, error)])
