"""read_file's bound, without a server: a hand-written transport serves what a hostile sandbox would,
a file that grows while it is read, and counts what the client took of it."""

import asyncio
import unittest

import httpx

import airlock

CHUNK = 64 << 10


class Growing:
    """A file body of size bytes (None: endless), made as it is read, counting what was read."""

    def __init__(self, size):
        self.size, self.read = size, 0

    def chunks(self):
        while self.size is None or self.read < self.size:
            n = CHUNK if self.size is None else min(CHUNK, self.size - self.read)
            self.read += n
            yield b"x" * n

    async def achunks(self):
        for c in self.chunks():
            yield c


def client(body, asynchronous=False):
    def handler(request):
        content = body.achunks() if asynchronous else body.chunks()
        return httpx.Response(200, content=content)

    if asynchronous:
        c = airlock.AsyncClient("http://airlock.invalid", "k")
        c._http = httpx.AsyncClient(base_url="http://airlock.invalid", transport=httpx.MockTransport(handler))
    else:
        c = airlock.Client("http://airlock.invalid", "k")
        c._http = httpx.Client(base_url="http://airlock.invalid", transport=httpx.MockTransport(handler))
    return c


class Bounded(unittest.TestCase):
    def test_grows_past_bound(self):
        for size in (None, 10 << 20, (1 << 20) + 1):
            body = Growing(size)
            with self.assertRaises(airlock.TooLargeError) as cm:
                client(body).read_file("sb_x", "/f", max_bytes=1 << 20)
            self.assertIn("/f is larger than 1048576 bytes", str(cm.exception))
            self.assertLessEqual(body.read, (1 << 20) + CHUNK, f"size {size}: read {body.read} bytes")

    def test_within_bound(self):
        for size in (0, 100, 1 << 20):
            self.assertEqual(client(Growing(size)).read_file("sb_x", "/f", max_bytes=1 << 20), b"x" * size)

    def test_default_bound(self):
        body = Growing(airlock.DEFAULT_MAX_READ_BYTES + (4 << 20))
        with self.assertRaises(airlock.TooLargeError):
            client(body).read_file("sb_x", "/f")
        self.assertLessEqual(body.read, airlock.DEFAULT_MAX_READ_BYTES + CHUNK)

    def test_bound_must_be_positive(self):
        for bad in (0, -1):
            with self.assertRaises(ValueError):
                client(Growing(1)).read_file("sb_x", "/f", max_bytes=bad)

    def test_async(self):
        body = Growing(None)

        async def read():
            c = client(body, asynchronous=True)
            try:
                return await c.read_file("sb_x", "/f", max_bytes=1 << 20)
            finally:
                await c.close()

        with self.assertRaises(airlock.TooLargeError):
            asyncio.run(read())
        self.assertLessEqual(body.read, (1 << 20) + CHUNK)
        ok = Growing(5)
        c = client(ok, asynchronous=True)
        self.assertEqual(asyncio.run(c.read_file("sb_x", "/f", max_bytes=5)), b"xxxxx")


if __name__ == "__main__":
    unittest.main()
