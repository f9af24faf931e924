"""A web application with the SMP router mounted at /chat (README, "In an ASGI application").

    .venv/bin/pip install -e '.[asgi]'
    .venv/bin/hypercorn --worker-class trio --bind 127.0.0.1:8000 examples.asgi_app:app
"""

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from router.gateway.asgi import GatewayApp
from router.server import RouterConfig

# The router: its identity, queues and messages in ./asgi-data (an SQLite store).
gateway = GatewayApp(RouterConfig(store="sqlite", data_dir=Path("asgi-data")))


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("My application. Its chat: /chat/demo/\n")


app = Starlette(
    routes=[Route("/", home), Mount("/chat", app=gateway)],
    lifespan=gateway.lifespan,  # starts the router with the application, stops it after
)
