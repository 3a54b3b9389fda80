"""HTTP without redirects, for every client that talks to a configured server (an OpenAI-compatible
endpoint, a retrieval server).

``urllib`` follows 301/302/303 by default and copies the request's headers, ``Authorization``
included, to wherever the ``Location`` points: a server (or whoever answers in its place) could
collect the API key that way. These clients only ever talk to the URL they were given; a
redirect comes back as an ``HTTPError`` with its 3xx status, and ``redirect_hint`` says what to do.
"""

from __future__ import annotations

import ipaddress
import urllib.error
import urllib.request
from typing import Any


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError(code) for the 3xx response itself


_OPENER = urllib.request.build_opener(_RefuseRedirects)


def urlopen_no_redirect(request: urllib.request.Request, timeout: float) -> Any:
    """``urllib.request.urlopen`` that never follows a redirect (and so never forwards credentials)."""
    return _OPENER.open(request, timeout=timeout)


def redirect_hint(error: urllib.error.HTTPError) -> str:
    """For a 3xx ``HTTPError``: where it pointed and that it was not followed; else ''."""
    if not 300 <= error.code < 400:
        return ""
    location = error.headers.get("Location", "?") if error.headers else "?"
    return (f" (a redirect to {location}; redirects are not followed so credentials stay with the configured "
            "host: use the final URL)")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) is this machine: ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
