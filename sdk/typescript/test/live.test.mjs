// The SDK against a real server (AIRLOCK_URL, AIRLOCK_API_KEY); run by internal/e2e/sdk_typescript_test.go.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Airlock, NotFoundError, InvalidArgumentError, AuthenticationError, PermissionDeniedError, TooLargeError } from 'airlock-sdk'

const c = new Airlock()
let sb

before(async () => { sb = await c.createSandbox({ timeoutSeconds: 600, metadata: { suite: 'typescript' } }) })
after(async () => { await c.deleteSandbox(sb.id) })

const collect = async (p) => {
  const out = []
  for await (const chunk of p) out.push(chunk)
  return out
}
const text = (chunks, stream) => new TextDecoder().decode(Buffer.concat(chunks.filter((x) => !stream || x.stream === stream).map((x) => x.data)))

test('exec', async () => {
  const r = await c.exec(sb.id, ['bash', '-c', 'echo out; echo err >&2; exit 3'])
  assert.deepEqual([r.exit_code, r.stdout, r.stderr], [3, 'out\n', 'err\n'])
  assert.equal((await c.exec(sb.id, ['sleep', '30'], { timeoutSeconds: 1 })).timed_out, true)
  assert.equal((await c.exec(sb.id, ['cat'], { stdin: 'fed' })).stdout, 'fed')
})

test('streams: output as it comes, stdin, signals', async () => {
  let p = await c.execStream(sb.id, ['bash', '-c', 'for i in 1 2 3; do echo $i; sleep 0.1; done; echo e >&2; exit 4'])
  const chunks = await collect(p)
  assert.equal((await p.wait()).exit_code, 4)
  assert.equal(text(chunks, 'stdout'), '1\n2\n3\n')
  assert.equal(text(chunks, 'stderr'), 'e\n')
  assert.ok(chunks.filter((x) => x.stream === 'stdout').length >= 2)

  p = await c.execStream(sb.id, ['cat'])
  await p.sendStdin('through stdin\n')
  await p.closeStdin()
  assert.equal(text(await collect(p)), 'through stdin\n')
  assert.equal((await p.wait()).exit_code, 0)

  p = await c.execStream(sb.id, ['sleep', '60'])
  await p.signal('KILL')
  assert.deepEqual(await p.wait(), { exit_code: -1, signal: 'SIGKILL' })
})

test('pty', async () => {
  const p = await c.execStream(sb.id, ['bash', '-i'], { pty: { rows: 24, cols: 80 } })
  await p.resize(30, 100)
  await p.sendStdin('stty size; echo pty-$((6*7)); exit\n')
  const out = text(await collect(p))
  assert.equal((await p.wait()).exit_code, 0)
  assert.match(out, /30 100/)
  assert.match(out, /pty-42/)
})

test('files', async () => {
  assert.equal((await c.mkdir(sb.id, '/tmp/ts')).type, 'dir')
  assert.equal((await c.writeFile(sb.id, '/tmp/ts/a.txt', 'hello')).size, 5)
  const blob = new Uint8Array(256_000).map((_, i) => i % 256)
  await c.writeFile(sb.id, '/tmp/ts/b.bin', blob, { mode: 0o600 })
  assert.deepEqual(await c.readFile(sb.id, '/tmp/ts/b.bin'), blob)
  assert.equal((await c.stat(sb.id, '/tmp/ts/b.bin')).mode, '0600')
  await c.move(sb.id, '/tmp/ts/a.txt', '/tmp/ts/c.txt')
  assert.deepEqual((await c.listFiles(sb.id, '/tmp/ts')).map((f) => f.name).sort(), ['b.bin', 'c.txt'])
  assert.equal(await c.readText(sb.id, '/tmp/ts/c.txt'), 'hello')
  await c.remove(sb.id, '/tmp/ts', { recursive: true })
  await assert.rejects(c.stat(sb.id, '/tmp/ts'), NotFoundError)
})

test('a bounded read of a huge sparse file', async () => {
  // As root, the sandbox makes a 64 GiB sparse file: readFile stops at its bound.
  const r = await c.exec(sb.id, ['truncate', '-s', '64G', '/tmp/huge'], { user: 'root' })
  assert.equal(r.exit_code, 0, r.stderr)
  await assert.rejects(c.readFile(sb.id, '/tmp/huge', { maxBytes: 1024 * 1024 }),
    (e) => e instanceof TooLargeError && /larger than 1048576 bytes/.test(e.message))
  // Positive control: a file within the bound reads whole.
  await c.writeFile(sb.id, '/tmp/small', 's'.repeat(1000))
  assert.equal(await c.readText(sb.id, '/tmp/small', { maxBytes: 1000 }), 's'.repeat(1000))
  await c.remove(sb.id, '/tmp/huge')
})

test('errors, tokens', async () => {
  await assert.rejects(c.getSandbox('sb_' + 'a'.repeat(26)), (e) => e instanceof NotFoundError && e.status === 404)
  await assert.rejects(c.createSandbox({ memoryMB: 1 }), (e) => e instanceof InvalidArgumentError && /memory_mb/.test(e.apiMessage))
  await assert.rejects(new Airlock({ apiKey: 'al_not_a_key' }).listSandboxes(), AuthenticationError)
  const tok = await c.createToken({ sandboxId: sb.id, scopes: ['exec'], ttlSeconds: 600 })
  const scoped = new Airlock({ apiKey: tok.token })
  assert.equal((await scoped.exec(sb.id, ['true'])).exit_code, 0)
  await assert.rejects(scoped.readFile(sb.id, '/etc/hostname'), PermissionDeniedError)
  assert.ok((await c.listTokens({ sandboxId: sb.id })).some((t) => t.id === tok.id))
  await c.revokeToken(tok.id)
  await assert.rejects(scoped.exec(sb.id, ['true']), AuthenticationError)
})

test('a session: pause, resume, snapshots, diff, restore, fork', async () => {
  const se = await c.createSession({ metadata: { suite: 'typescript' }, idleTimeoutSeconds: 0 })
  try {
    await c.exec(se.id, ['bash', '-c', "nohup bash -c 'n=0; while true; do n=$((n+1)); echo $n > /tmp/c.new; mv /tmp/c.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &"])
    await c.writeFile(se.id, '/home/user/note.txt', 'v1')
    const first = await c.snapshotSession(se.id, 'v1')
    await c.writeFile(se.id, '/home/user/note.txt', 'v2')
    const second = await c.snapshotSession(se.id)
    const d = await c.diff(se.id, first.id, second.id, '/home/user/note.txt')
    assert.match(d.unified, /-v1/)
    assert.match(d.unified, /\+v2/)
    assert.equal((await c.pauseSession(se.id)).state, 'paused')
    assert.equal((await c.resumeSession(se.id)).state, 'running')
    const a = Number(await c.readText(se.id, '/tmp/count'))
    await new Promise((r) => setTimeout(r, 500))
    const b = Number(await c.readText(se.id, '/tmp/count'))
    assert.ok(b > a, `the process went on after the resume: ${a} then ${b}`)
    assert.ok((await c.timeline(se.id)).snapshots.some((s) => s.id === first.id))
    await c.restoreSession(se.id, { snapshotId: first.id })
    assert.equal(await c.readText(se.id, '/home/user/note.txt'), 'v1')
    const forks = await c.forkSession(se.id, 2)
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.equal(await c.readText(f.id, '/home/user/note.txt'), 'v1')
      await c.deleteSession(f.id)
    }
    assert.ok((await c.setSessionTimeout(se.id, 3600)).ends_at)
    assert.ok((await c.listSessions({ metadata: { suite: 'typescript' } })).some((s) => s.id === se.id))
  } finally {
    await c.deleteSession(se.id)
  }
})
