"""The test run's network guard, as on the CI machine, which has no network: connecting to
anything but this machine and looking up any name but its own fail at once, saying so.

`install` puts it on this process; `SITE` is a directory whose `sitecustomize` puts it on
every Python process started with the directory on PYTHONPATH (the tests' subprocesses).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

SITE = Path(__file__).resolve().parent / "offline_site"
_LOCAL_NAMES = ("localhost", "localhost.", "localhost.localdomain")


class NetworkUsedError(OSError):
    """A test reached for a host other than this machine's loopback."""


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def loopback(address: Any) -> bool:
    """Whether a socket address (or a host) is this machine's loopback."""
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    ip = _ip(host) if isinstance(host, str) else None
    return ip is not None and ip.is_loopback


def _local_lookup(host: Any) -> bool:
    """Whether looking `host` up needs no name server: no host, this machine's names, or an address."""
    if host is None:
        return True
    name = (host.decode() if isinstance(host, bytes) else str(host)).lower()
    return name in ("", *_LOCAL_NAMES, socket.gethostname().lower()) or name.endswith(".localhost") or _ip(name) is not None


def install() -> Callable[[], None]:
    """Guard `socket` connections and name lookups in this process; the function undoes it."""
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
    getaddrinfo, gethostbyname, gethostbyname_ex = socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex

    def refuse(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address):
            raise NetworkUsedError(errno.ENETUNREACH, f"a test reached for {address!r}: tests reach only this machine")

    def refuse_lookup(host: Any) -> None:
        if not _local_lookup(host):
            raise socket.gaierror(socket.EAI_NONAME, f"a test looked up {host!r}: tests reach only this machine")

    def guarded(sock: socket.socket, address: Any) -> None:
        refuse(sock, address)
        connect(sock, address)

    def guarded_ex(sock: socket.socket, address: Any) -> int:
        refuse(sock, address)
        return connect_ex(sock, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        refuse_lookup(host)
        return getaddrinfo(host, *args, **kwargs)

    def guarded_gethostbyname(host: str) -> str:
        refuse_lookup(host)
        return gethostbyname(host)

    def guarded_gethostbyname_ex(host: str) -> tuple[str, list[str], list[str]]:
        refuse_lookup(host)
        return gethostbyname_ex(host)

    socket.socket.connect, socket.socket.connect_ex = guarded, guarded_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = (
        guarded_getaddrinfo, guarded_gethostbyname, guarded_gethostbyname_ex,
    )

    def undo() -> None:
        socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = getaddrinfo, gethostbyname, gethostbyname_ex

    return undo
