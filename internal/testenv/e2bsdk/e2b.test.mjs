// The unmodified e2b SDK (npm) against Airlock: E2B_API_URL and E2B_SANDBOX_URL point at Airlock's /e2b,
// E2B_API_KEY is an Airlock API key. Run by internal/e2e/e2b_test.go with node's test runner.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError, CommandExitError, FileNotFoundError } from 'e2b'

const run = `${process.pid}-${Date.now()}`
const other = { apiKey: process.env.OTHER_API_KEY }

test('create, info, list, timeout, pause, connect, kill', async () => {
  const note = 'a b&c=d/é%'
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { suite: 'e2b', run, note } })
  assert.match(sbx.sandboxId, /^se_/)
  const info = await sbx.getInfo()
  assert.equal(info.state, 'running')
  assert.equal(info.metadata.run, run)
  assert.equal(info.lifecycle.onTimeout, 'kill')
  const ahead = info.endAt.getTime() - Date.now()
  assert.ok(ahead > 100_000 && ahead <= 121_000, `ends ${ahead} ms from now; want about 120 s`)

  await sbx.setTimeout(600_000)
  const later = await sbx.getInfo()
  assert.ok(later.endAt.getTime() - info.endAt.getTime() > 400_000, 'setTimeout moved the end')

  const page = await Sandbox.list({ query: { metadata: { run, note }, state: ['running'], template: 'default' } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.deepEqual(await Sandbox.list({ query: { metadata: { run, note: 'a b' } } }).nextItems(), [])
  assert.deepEqual(await Sandbox.list({ query: { metadata: { run }, state: ['paused'] } }).nextItems(), [])
  // Newest first, as on E2B, unless asked otherwise.
  const second = await Sandbox.create({ timeoutMs: 60_000, metadata: { run, note } })
  const order = async (o) => (await Sandbox.list({ query: { metadata: { run, note } }, ...(o ? { order: o } : {}) }).nextItems()).map((s) => s.sandboxId)
  assert.deepEqual(await order(), [second.sandboxId, sbx.sandboxId])
  assert.deepEqual(await order('asc'), [sbx.sandboxId, second.sandboxId])
  await second.kill()

  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'a second pause says it was paused already')
  const paused = await Sandbox.list({ query: { metadata: { run }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])

  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(again.sandboxId, sbx.sandboxId)
  const resumed = await again.getInfo()
  assert.equal(resumed.state, 'running')
  assert.ok(resumed.endAt.getTime() - Date.now() <= 61_000, 'connect gave the resumed sandbox its timeout')

  assert.equal(await again.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill finds nothing')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
})

test('autoPause: the timeout pauses, connect resumes', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause' }, metadata: { run } })
  assert.equal((await sbx.getInfo()).lifecycle.onTimeout, 'pause')
  let state
  for (let i = 0; i < 120 && state !== 'paused'; i++) {
    await new Promise((r) => setTimeout(r, 500))
    state = (await sbx.getInfo()).state
  }
  assert.equal(state, 'paused', 'paused by its timeout')
  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await back.getInfo()).state, 'running')
  await back.kill()
})

test("another tenant's key finds nothing", async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, metadata: { run } })
  try {
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, other), SandboxNotFoundError)
    await assert.rejects(Sandbox.connect(sbx.sandboxId, other), SandboxNotFoundError)
    assert.equal(await Sandbox.kill(sbx.sandboxId, other), false)
    assert.equal(await Sandbox.pause(sbx.sandboxId, other).catch((e) => e.name), 'SandboxNotFoundError')
    assert.deepEqual(await Sandbox.list({ ...other, query: { metadata: { run } } }).nextItems(), [])
    assert.equal((await sbx.getInfo()).state, 'running', 'untouched')
  } finally {
    await sbx.kill()
  }
})

test('bad input gets E2B errors with a message', async () => {
  await assert.rejects(Sandbox.create('no-such-template', { timeoutMs: 60_000 }), (e) => /404.*no-such-template/s.test(e.message))
  await assert.rejects(Sandbox.create({ timeoutMs: 100 * 86_400_000 }), (e) => /400.*timeout/s.test(e.message))
  await assert.rejects(Sandbox.getInfo('sb_not-a-session'), SandboxNotFoundError)
  await assert.rejects(Sandbox.list({ apiKey: 'e2b_0000' }).nextItems(), (e) => e.name === 'AuthenticationError')
})

test('metrics: getMetrics, a window, and sandboxes that are not there', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run } })
  try {
    await sbx.commands.run('dd if=/dev/zero of=/home/user/m bs=1M count=16 conv=fsync')
    const ms = await sbx.getMetrics()
    assert.ok(ms.length >= 1, 'at least the reading taken now')
    const m = ms[ms.length - 1]
    assert.ok(m.timestamp instanceof Date && Math.abs(Date.now() - m.timestamp.getTime()) < 30_000, `timestamp ${m.timestamp}`)
    assert.equal(m.cpuCount, 1)
    assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpuUsedPct ${m.cpuUsedPct}`)
    assert.equal(m.memTotal, 512 * 2 ** 20)
    assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal, `memUsed ${m.memUsed}`)
    assert.ok(m.memCache >= 0, `memCache ${m.memCache}`)
    assert.ok(m.diskTotal > 900 * 2 ** 20 && m.diskTotal <= 2 ** 30, `diskTotal ${m.diskTotal}`)
    assert.ok(m.diskUsed >= 16 * 2 ** 20 && m.diskUsed <= m.diskTotal, `diskUsed ${m.diskUsed}`)
    const window = await Sandbox.getMetrics(sbx.sandboxId, { start: new Date(Date.now() - 3_600_000), end: new Date() })
    assert.ok(window.length >= 1, 'a window up to now ends with the reading taken now')
    assert.deepEqual(await Sandbox.getMetrics(sbx.sandboxId, { start: new Date(Date.now() + 3_600_000) }), [])
    await assert.rejects(Sandbox.getMetrics(sbx.sandboxId, other), SandboxNotFoundError)
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.getMetrics(sbx.sandboxId), SandboxNotFoundError, 'a killed sandbox')
  await assert.rejects(Sandbox.getMetrics('se_nonexistent00000000000000'), SandboxNotFoundError)
})

test('commands: exit codes, stderr, streaming, background, kill, stdin, list', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { run } })
  try {
    const r = await sbx.commands.run('echo hello; echo oops >&2; echo "$FOO" "$(pwd)"', { envs: { FOO: 'bar' }, cwd: '/tmp' })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello\nbar /tmp\n')
    assert.equal(r.stderr, 'oops\n')
    assert.equal((await sbx.commands.run('whoami')).stdout.trim(), 'user')

    await assert.rejects(sbx.commands.run('echo out; echo err >&2; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, `${e}`)
      assert.equal(e.exitCode, 3)
      assert.equal(e.stdout, 'out\n')
      assert.equal(e.stderr, 'err\n')
      return true
    })

    const chunks = []
    const big = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.2; done; head -c 200000 /dev/zero | tr "\\0" x', {
      onStdout: (d) => chunks.push(d),
    })
    assert.ok(chunks.length >= 3, `${chunks.length} stdout callbacks`)
    assert.equal(chunks.join(''), big.stdout)
    assert.ok(big.stdout.startsWith('line1\nline2\nline3\n') && big.stdout.length === 18 + 200000)

    const bg = await sbx.commands.run('echo started; sleep 600', { background: true, timeoutMs: 0 })
    assert.ok(bg.pid > 0)
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === bg.pid), `pid ${bg.pid} in ${JSON.stringify(listed)}`)
    // Another client follows it by pid (commands.connect): its later output arrives.
    let seen = ''
    const ticker = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.2; done', { background: true })
    const follower = await sbx.commands.connect(ticker.pid, { onStdout: (d) => (seen += d) })
    const followed = await follower.wait()
    assert.equal(followed.exitCode, 0)
    assert.match(seen, /tick6/)
    assert.equal(await sbx.commands.kill(bg.pid), true)
    await assert.rejects(bg.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
    assert.equal(await sbx.commands.kill(bg.pid), false, 'killing it again finds nothing')

    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'through stdin\n')
    await sbx.commands.closeStdin(cat.pid)
    const catted = await cat.wait()
    assert.equal(catted.stdout, 'through stdin\n')

    // A command's timeout kills it, as envd's does.
    await assert.rejects(sbx.commands.run('sleep 31', { timeoutMs: 1_000 }), (e) => e.name === 'TimeoutError')
    await new Promise((r) => setTimeout(r, 300))
    const after = await sbx.commands.list()
    assert.ok(!after.some((p) => p.args.join(' ').includes('sleep 31')), `killed at its timeout: ${JSON.stringify(after)}`)

    assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout.trim(), '0')
  } finally {
    await sbx.kill()
  }
})

test('pty: output, input, resize', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run } })
  try {
    const dec = new TextDecoder()
    let out = ''
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((6*7))\nexit\n'))
    const res = await pty.wait()
    assert.equal(res.exitCode, 0)
    assert.match(out, /30 100/)
    assert.match(out, /pty-42/)
  } finally {
    await sbx.kill()
  }
})

test('files: write, read, list, stat, rename, remove, watch', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run } })
  try {
    const info = await sbx.files.write('notes/a.txt', 'hello files')
    assert.equal(info.path, '/home/user/notes/a.txt')
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello files')
    const bytes = new Uint8Array(300_000).map((_, i) => i % 251)
    await sbx.files.write('/tmp/blob.bin', bytes)
    assert.deepEqual(await sbx.files.read('/tmp/blob.bin', { format: 'bytes' }), bytes)
    await sbx.files.write([{ path: '/tmp/m/1.txt', data: 'one' }, { path: '/tmp/m/2.txt', data: 'two' }])
    assert.deepEqual((await sbx.files.list('/tmp/m')).map((e) => [e.name, e.type, e.size]), [['1.txt', 'file', 3], ['2.txt', 'file', 3]])
    assert.equal(await sbx.files.exists('/tmp/m/1.txt'), true)
    assert.equal(await sbx.files.exists('/tmp/m/nope'), false)
    assert.equal(await sbx.files.makeDir('/tmp/m/sub'), true)
    assert.equal(await sbx.files.makeDir('/tmp/m/sub'), false, 'made already')
    const moved = await sbx.files.rename('/tmp/m/1.txt', '/tmp/m/sub/one.txt')
    assert.equal(moved.path, '/tmp/m/sub/one.txt')
    const st = await sbx.files.getInfo('/tmp/m/sub/one.txt')
    assert.equal(st.type, 'file')
    assert.equal(st.size, 3)
    await sbx.files.remove('/tmp/m/sub')
    assert.equal(await sbx.files.exists('/tmp/m/sub/one.txt'), false)
    await assert.rejects(sbx.files.read('/tmp/none.txt'), FileNotFoundError)
    // Written by the sandbox's user, as a command sees it.
    assert.equal((await sbx.commands.run('cat ~/notes/a.txt')).stdout, 'hello files')

    const events = []
    const watch = await sbx.files.watchDir('/tmp/w', (e) => events.push(`${e.type} ${e.name}`), { recursive: true }).catch(async () => {
      await sbx.files.makeDir('/tmp/w')
      return sbx.files.watchDir('/tmp/w', (e) => events.push(`${e.type} ${e.name}`), { recursive: true })
    })
    await sbx.commands.run('echo x > /tmp/w/new.txt; mkdir -p /tmp/w/d; echo y > /tmp/w/d/deep.txt')
    for (let i = 0; i < 40 && !events.includes('create d/deep.txt'); i++) await new Promise((r) => setTimeout(r, 100))
    await sbx.commands.run('rm /tmp/w/new.txt')
    for (let i = 0; i < 40 && !events.includes('remove new.txt'); i++) await new Promise((r) => setTimeout(r, 100))
    await watch.stop()
    for (const want of ['create new.txt', 'create d', 'create d/deep.txt', 'remove new.txt']) {
      assert.ok(events.includes(want), `${want} in ${JSON.stringify(events)}`)
    }
  } finally {
    await sbx.kill()
  }
})

test('a paused sandbox keeps its processes and files; its envd needs its token', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run } })
  try {
    // The count is replaced whole (rename), so that no read sees it half written.
    await sbx.commands.run('n=0; while true; do n=$((n+1)); echo $n > /tmp/c.new; mv /tmp/c.new /tmp/count; sleep 0.1; done', { background: true, timeoutMs: 0 })
    await new Promise((r) => setTimeout(r, 500))
    assert.equal(await sbx.pause(), true)
    await assert.rejects(sbx.commands.run('true'), 'a paused sandbox runs nothing until connected')
    const back = await Sandbox.connect(sbx.sandboxId)
    const a = Number((await back.files.read('/tmp/count')).trim())
    await new Promise((r) => setTimeout(r, 500))
    const b = Number((await back.files.read('/tmp/count')).trim())
    assert.ok(a > 0 && b > a, `the counter went on after the resume: ${a} then ${b}`)

    // Another sandbox's token is refused; so is none.
    const other = await Sandbox.create({ timeoutMs: 60_000, metadata: { run } })
    const url = `${process.env.E2B_SANDBOX_URL}/process.Process/List`
    const call = (token) => fetch(url, { method: 'POST', body: '{}', headers: {
      'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, ...(token ? { 'X-Access-Token': token } : {}) } })
    assert.equal((await call(other.envdAccessToken)).status, 404)
    assert.equal((await call(process.env.OTHER_API_KEY)).status, 404, "another tenant's key finds nothing")
    assert.equal((await call(undefined)).status, 401)
    assert.equal((await call(sbx.envdAccessToken ?? back.envdAccessToken)).status, 200, 'positive control')
    await other.kill()
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('snapshots: kept apart from their sandbox, new sandboxes start from them', async () => {
  const name = `snap-${run}`
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run } })
  const made = []
  try {
    await sbx.files.write('/home/user/state.json', '{"step": 1}')
    // A process whose memory the snapshot holds: it counts on from where it was.
    await sbx.commands.run('n=0; while true; do n=$((n+1)); echo $n > /tmp/c.new; mv /tmp/c.new /tmp/count; sleep 0.1; done', { background: true, timeoutMs: 0 })
    await new Promise((r) => setTimeout(r, 500))
    const snap = await sbx.createSnapshot({ name })
    assert.ok(snap.snapshotId, 'an ID')
    assert.deepEqual(snap.names, [name])
    const unnamed = await Sandbox.createSnapshot(sbx.sandboxId)
    assert.deepEqual(unnamed.names, [])
    assert.equal((await sbx.getInfo()).state, 'running', 'the sandbox runs on')
    await sbx.files.write('/home/user/state.json', '{"step": 2}')

    // Listed, by sandbox and by name; not a sandbox.
    const ids = (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId)
    assert.deepEqual(ids.sort(), [snap.snapshotId, unnamed.snapshotId].sort())
    assert.deepEqual((await Sandbox.listSnapshots({ name }).nextItems()).map((s) => s.snapshotId), [snap.snapshotId])
    const page = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 })
    assert.equal((await page.nextItems()).length, 1)
    assert.equal(page.hasNext, true, 'paged')
    assert.equal((await page.nextItems()).length, 1)
    const listed = await Sandbox.list({ query: { metadata: { run } } }).nextItems()
    assert.ok(!listed.some((s) => s.sandboxId === snap.snapshotId), 'a snapshot is not a sandbox')
    await assert.rejects(Sandbox.connect(snap.snapshotId), SandboxNotFoundError)
    await assert.rejects(Sandbox.getInfo(snap.snapshotId), SandboxNotFoundError)
    // On /v1 it is a paused session that never runs.
    const v1 = process.env.E2B_API_URL.replace(/\/e2b$/, '/v1')
    const resume = await fetch(`${v1}/sessions/${snap.snapshotId}/resume`, { method: 'POST',
      headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
    assert.equal(resume.status, 409, 'a kept snapshot is not resumed')
    assert.match((await resume.json()).error.message, /kept snapshot/)

    // The sandbox goes; its snapshot stays, and new sandboxes start from it, by ID and by name.
    await sbx.kill()
    const a = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000, metadata: { run, from: 'id' } })
    made.push(a)
    assert.equal((await a.files.read('/home/user/state.json')), '{"step": 1}', 'the files as they were')
    const c1 = Number((await a.files.read('/tmp/count')).trim())
    await new Promise((r) => setTimeout(r, 500))
    const c2 = Number((await a.files.read('/tmp/count')).trim())
    assert.ok(c1 > 0 && c2 > c1, `the process counts on: ${c1} then ${c2}`)
    assert.equal((await a.getInfo()).metadata.from, 'id')
    const b = await Sandbox.create(name, { timeoutMs: 60_000, metadata: { run } })
    made.push(b)
    await b.files.write('/home/user/state.json', 'b')
    assert.equal((await a.files.read('/home/user/state.json')), '{"step": 1}', 'each its own')
    assert.equal((await b.commands.run('cat /home/user/state.json')).stdout, 'b')
    await assert.rejects(Sandbox.create(snap.snapshotId, { envs: { A: '1' } }), (e) => /400.*envVars/s.test(e.message))

    // Another tenant finds none of it.
    assert.deepEqual(await Sandbox.listSnapshots({ ...other }).nextItems(), [])
    assert.deepEqual(await Sandbox.listSnapshots({ ...other, name }).nextItems(), [])
    await assert.rejects(Sandbox.create(snap.snapshotId, { ...other, timeoutMs: 60_000 }), (e) => /404/.test(e.message))
    await assert.rejects(Sandbox.create(name, { ...other, timeoutMs: 60_000 }), (e) => /404/.test(e.message))
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, other), false)
    await assert.rejects(Sandbox.createSnapshot(a.sandboxId, other), SandboxNotFoundError)

    // Bad input.
    await assert.rejects(Sandbox.createSnapshot(a.sandboxId, { name: 'not a name' }), (e) => /400.*name/s.test(e.message))
    await assert.rejects(Sandbox.listSnapshots({ limit: 1000 }).nextItems(), (e) => /400.*limit/s.test(e.message))

    // Deleted, it starts nothing; the sandboxes made from it go on.
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    assert.equal(await Sandbox.deleteSnapshot(unnamed.snapshotId), true)
    await assert.rejects(Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 }), (e) => /404/.test(e.message))
    assert.deepEqual(await Sandbox.listSnapshots({ name }).nextItems(), [])
    assert.equal((await a.commands.run('cat /home/user/state.json')).stdout, '{"step": 1}')
  } finally {
    for (const s of made) await s.kill()
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('a hostile sandbox: floods and planted links reach no further than itself', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run } })
  try {
    // Root in the sandbox makes a directory too big to watch, a line of 8 MiB, and a link to the
    // host's files as the sandbox sees them.
    await sbx.commands.run('mkdir -p /tmp/flood && cd /tmp/flood && seq 1 12000 | xargs touch; ln -s /etc/shadow /tmp/shadow-link', { user: 'root' })
    await assert.rejects(
      new Promise((resolve, reject) => {
        sbx.files.watchDir('/tmp/flood', () => {}, { onExit: (e) => (e ? reject(e) : resolve()) }).catch(reject)
      }),
      (e) => /more than 10000 entries/.test(e.message),
    )
    const line = await sbx.commands.run('head -c 8388608 /dev/zero | tr "\\0" z', { user: 'root' })
    assert.equal(line.stdout.length, 8 << 20)
    // The link leads to the sandbox's own /etc/shadow (no user's hash of this machine), read by root.
    const shadow = await sbx.files.read('/tmp/shadow-link', { user: 'root' })
    assert.match(shadow, /^root:/)
    assert.equal(shadow, (await sbx.commands.run('cat /etc/shadow', { user: 'root' })).stdout)
    // Positive control: a small watch still works after all that.
    await sbx.files.makeDir('/tmp/calm')
    const events = []
    const w = await sbx.files.watchDir('/tmp/calm', (e) => events.push(e.name))
    await sbx.files.write('/tmp/calm/ok.txt', 'ok')
    for (let i = 0; i < 40 && !events.includes('ok.txt'); i++) await new Promise((r) => setTimeout(r, 100))
    await w.stop()
    assert.ok(events.includes('ok.txt'), JSON.stringify(events))
  } finally {
    await sbx.kill()
  }
})
