"""The stable front door of a streaming service: an Open Inference Protocol gateway routing by model name.

>>> from oltunes.gateway import Gateway, GatewayServer
>>> gw = Gateway()
>>> route = gw.add("cnn", slo_ms=100)   # a supervisor then calls route.switch(worker_url)
"""

from oltunes.gateway.app import Gateway
from oltunes.gateway.routing import Route
from oltunes.gateway.server import GatewayServer

__all__ = ["Gateway", "GatewayServer", "Route"]
