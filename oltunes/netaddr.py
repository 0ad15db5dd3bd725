"""Binding a service: which addresses need a token (`check_bind`) and a free port (`free_port`); shared by the tuning
service, the gateway, the launchers and the worker.

Kept free of heavy imports: the worker image (no learner, no Prefect) imports it through the gateway's protocol.
"""

from __future__ import annotations

import ipaddress
import socket

from oltunes.errors import ConfigError


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


def check_bind(host: str, token: str | None, *, service: str, token_setting: str) -> None:
    """Refuse to expose an unauthenticated `service` ("tuner", "gateway"): a non-loopback `host` needs a token,
    set by `token_setting` (e.g. ``OLTUNES_TUNER_TOKEN``)."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the {service} on non-loopback address {host!r} without a token: "
            f"set {token_setting} (clients send 'Authorization: Bearer <token>') or bind 127.0.0.1"
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (bound and released: a tiny race with other binders, fine on loopback)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host.strip("[]"), 0))
        return int(s.getsockname()[1])
