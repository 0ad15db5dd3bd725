"""Which addresses a service may bind without a token: shared by the tuning service, the gateway and the worker.

Kept free of heavy imports: the worker image (no learner, no Prefect) imports it through the gateway's protocol.
"""

from __future__ import annotations

import ipaddress
import socket


def is_loopback(host: str) -> bool:
    """True when every address `host` resolves to is a loopback address (unresolvable: False)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)
