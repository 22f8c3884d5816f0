"""uvicorn's side of `specdec serve`: connections bounded, a deadline for each request's headers, a clean exit.

`server_config` bounds the connections answered at once (`max_connections`: past it uvicorn
answers 503, past twice it a new connection is closed unanswered) and gives each connection
`HEADER_SECONDS` to send each request's line and headers (a client that trickles them is cut
off). `Server` is uvicorn's server ending with exit 0 on Ctrl-C or SIGTERM:

    server = Server(server_config(create_app(worker, defaults, "SmolLM2"), max_connections=64))
    server.run(sockets=[sock])      # Ctrl-C: the server shuts down, the command exits 0

Left out: the app itself (app.py), listening on the socket and the command's options (cli/serve.py).
"""

from __future__ import annotations

import contextlib
import signal

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_SECONDS = 10.0  # for a new connection to send its request's headers


class Server(uvicorn.Server):
    """uvicorn's server, except that Ctrl-C and SIGTERM end it as a finished command (exit 0).

    uvicorn raises the signal again once it has shut down, so the process "dies by SIGTERM"
    (143 to a supervisor); here the handlers only ask it to stop (a second Ctrl-C: at once).
    """

    @contextlib.contextmanager
    def capture_signals(self):
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def server_config(app, max_connections: int, header_seconds: float = HEADER_SECONDS, **kw) -> uvicorn.Config:
    """uvicorn's settings for `app`: at most `max_connections` answered at once, and a deadline
    for each connection's request headers (a client that trickles them is cut off)."""

    class Bounded(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > 2 * max_connections:  # far past the bound: not even a 503
                transport.close()
                return
            self._headers_due()

        def on_response_complete(self) -> None:
            self.answered = getattr(self, "answered", 0) + 1
            super().on_response_complete()
            self._headers_due()  # the next request on this connection gets the same deadline

        def _headers_due(self) -> None:
            self.loop.call_later(header_seconds, self._check_headers, getattr(self, "answered", 0))

        def _check_headers(self, answered: int) -> None:
            # Still no complete request line and headers (h11 waits in IDLE until they are in),
            # and no response on this connection since the deadline was set: cut it off.
            if self.conn.their_state is h11.IDLE and getattr(self, "answered", 0) == answered and not self.transport.is_closing():
                self.transport.close()

    return uvicorn.Config(app, http=Bounded, limit_concurrency=max_connections, log_level="warning", access_log=False, lifespan="off", **kw)
