"""A loopback relay that carries plain TCP connections over verified TLS to the SQL endpoint, for
clients that speak TLS without verifying the server: dbt-spark 1.11's Thrift transport
(``dbt.adapters.spark.connections.build_ssl_transport``) sets ``verify_mode = CERT_NONE`` and
``check_hostname = False``, so with ``use_ssl`` anyone on the path could pose as the endpoint and
read the login and every row. ``kappa dbt`` (and Dagster's dbt assets) hand dbt this relay's
loopback address instead: the relay makes each of dbt's connections a TLS connection from this
process, with the endpoint's certificate and host name checked
(:func:`kappa.services.serve.verified_context`).

What crosses loopback in plain text stays in this machine (or pod): dbt's SASL PLAIN login and its
rows, between two processes of the same user. The listener binds 127.0.0.1 on a free port and
lives only while the dbt command runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from kappa.services.serve import verified_context

#: Bytes read per ``read`` on either side of a carried connection.
CHUNK = 64 * 1024


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


@contextlib.contextmanager
def tls_relay(host: str, port: int, ca_file: Path | str | None = None) -> Iterator[tuple[str, int]]:
    """Yield ``("127.0.0.1", relay port)``: every TCP connection made to it is carried, byte for
    byte in both directions, over a TLS connection to the endpoint at ``host``:``port`` whose
    certificate is verified, host name included, against ``ca_file`` (PEM; default the system's
    certificate authorities). A connection whose TLS handshake fails is closed at once; when either
    side of a carried connection ends, both are closed (TLS has no half-close; a request/response
    client such as Thrift reads its answers before it closes). On exit the listener and every
    carried connection are closed.

    Raises :class:`kappa.services.serve.ServeError` before listening when a first handshake with
    the endpoint fails (the certificate does not verify, no TLS there, no answer), naming why."""
    context = verified_context(host, port, ca_file)
    loop = asyncio.new_event_loop()
    tasks: set[asyncio.Task] = set()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        tasks.add(task)
        task.add_done_callback(tasks.discard)  # the set holds only connections still carried
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
        except OSError:  # ssl.SSLError included
            client_writer.close()
            return
        await asyncio.gather(_carry(client_reader, up_writer), _carry(up_reader, client_writer))

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    relay_port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, name=f"tls-relay-{relay_port}", daemon=True)
    thread.start()

    async def close() -> None:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    try:
        yield "127.0.0.1", relay_port
    finally:
        asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
