// readFile's bound, without a server: a hand-written fetch serves what a hostile sandbox would, a file
// that grows while it is read, and counts what the client took of it.
import { test, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { Airlock, TooLargeError, DEFAULT_MAX_READ_BYTES } from 'airlock-sdk'

const CHUNK = 64 * 1024
const realFetch = globalThis.fetch
afterEach(() => { globalThis.fetch = realFetch })

// serve makes fetch answer with a body of size bytes ('x'; Infinity: endless) and returns its counter.
function serve(size) {
  const body = { read: 0 }
  globalThis.fetch = async () => new Response(new ReadableStream({
    pull(ctrl) {
      if (body.read >= size) return ctrl.close()
      const n = Math.min(CHUNK, size - body.read)
      body.read += n
      ctrl.enqueue(new Uint8Array(n).fill(120))
    },
  }, { highWaterMark: 0 }), { status: 200 })
  return body
}

const c = new Airlock({ url: 'http://airlock.invalid', apiKey: 'k' })

test('a file that grows past the bound', async () => {
  for (const size of [Infinity, 10 * 1024 * 1024, 1024 * 1024 + 1]) {
    const body = serve(size)
    await assert.rejects(c.readFile('sb_x', '/f', { maxBytes: 1024 * 1024 }),
      (e) => e instanceof TooLargeError && e.code === 'too_large' && /\/f is larger than 1048576 bytes/.test(e.message))
    assert.ok(body.read <= 1024 * 1024 + 2 * CHUNK, `size ${size}: read ${body.read} bytes`)
  }
})

test('a file within the bound', async () => {
  for (const size of [0, 100, 1024 * 1024]) {
    serve(size)
    const got = await c.readFile('sb_x', '/f', { maxBytes: 1024 * 1024 })
    assert.equal(got.byteLength, size)
    assert.ok(got.every((b) => b === 120))
  }
  serve(5)
  assert.equal(await c.readText('sb_x', '/f', { maxBytes: 5 }), 'xxxxx')
})

test('the default bound', async () => {
  const body = serve(Infinity)
  await assert.rejects(c.readFile('sb_x', '/f'), TooLargeError)
  assert.ok(body.read <= DEFAULT_MAX_READ_BYTES + 2 * CHUNK, `read ${body.read} bytes`)
})

test('a bound must be positive', async () => {
  serve(1)
  for (const bad of [0, -1]) await assert.rejects(c.readFile('sb_x', '/f', { maxBytes: bad }), RangeError)
})
