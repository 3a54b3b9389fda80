"""HTTP rules for every client that talks to a configured server (an OpenAI-compatible endpoint, a
retrieval server, an env server).

Redirects are never followed: a client that follows one copies the request's headers,
``Authorization`` included, to wherever the ``Location`` points, so a server (or whoever answers in
its place) could collect the API key that way. These clients only ever talk to the URL they were
given (httpx's default); a 3xx answer is an error, and ``redirect_hint`` says what to do. A loopback
server is reached directly, never through the environment's proxies (``is_loopback``).
"""

from __future__ import annotations

import ipaddress
from typing import Any


def redirect_hint(response: Any) -> str:
    """For a 3xx answer (an ``httpx.Response``): where it pointed and that it was not followed; else ''."""
    if response is None or not 300 <= response.status_code < 400:
        return ""
    location = response.headers.get("location", "?")
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


def replaying_receive(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that hands the app a body already read (and checked) by a guard, then passes the
    connection's own messages (a disconnect) through."""
    delivered = False

    async def replay() -> dict:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
