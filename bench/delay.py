"""A TCP proxy to PostgreSQL's Unix socket that holds every message from a client for a
while before passing it on: added round-trip latency where the kernel has no `netem`
qdisc to add it (`python -m bench.workers fleet netem` says which it used, and measures
the round trips it got).

    python -m bench.delay PORT SOCKET MILLISECONDS

asyncio wakes at millisecond steps, so a hold is at least what is asked and often up to
a millisecond more; the bench prints the round trips measured through it.
"""

from __future__ import annotations

import asyncio
import sys


async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               seconds: float) -> None:
    """Pass what `reader` gets to `writer`, each message `seconds` after it arrived, in
    order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + seconds, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    await sender


async def serve(port: int, socket_path: str, seconds: float) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(held(reader, up_writer, seconds), held(up_reader, writer, 0.0),
                             return_exceptions=True)

    server = await asyncio.start_server(client, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, socket_path, ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    asyncio.run(serve(port, socket_path, ms / 1000))


if __name__ == "__main__":
    main()
