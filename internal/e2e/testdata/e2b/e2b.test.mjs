// The unmodified e2b SDK (npm) against Airlock: E2B_API_URL and E2B_SANDBOX_URL point at Airlock's /e2b,
// E2B_API_KEY is an Airlock API key. Run by internal/e2e/e2b_test.go with node's test runner.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'

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
