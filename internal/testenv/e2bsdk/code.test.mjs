// The unmodified @e2b/code-interpreter SDK (npm) against Airlock, with only E2B_API_URL and
// E2B_SANDBOX_URL pointing at Airlock's /e2b. Its default template, code-interpreter-v1, is Airlock's
// code-interpreter template (built first by internal/e2e/code_test.go), whose interpreter serves the
// SDK's /execute and /contexts on port 49999, reached through the E2b-Sandbox-Port header.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

test('runCode: state, output, errors, charts, tables, contexts, pause and connect', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  try {
    let r = await sbx.runCode('x = 20\nx * 2')
    assert.equal(r.text, '40')
    assert.equal(r.error, undefined)
    assert.ok(r.executionCount >= 1)

    const out = []
    const errs = []
    r = await sbx.runCode('import sys\nprint("hello", x)\nprint("oops", file=sys.stderr)', {
      onStdout: (m) => out.push(m.line),
      onStderr: (m) => errs.push(m.line),
    })
    assert.deepEqual(r.logs.stdout, ['hello 20\n'])
    assert.deepEqual(r.logs.stderr, ['oops\n'])
    assert.deepEqual(out, ['hello 20\n'])
    assert.deepEqual(errs, ['oops\n'])

    r = await sbx.runCode('def f():\n    return 1/0\nf()')
    assert.equal(r.error.name, 'ZeroDivisionError')
    assert.match(r.error.traceback, /return 1\/0/)

    r = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 4])\nplt.show()')
    assert.equal(r.results.length, 1)
    assert.ok(Buffer.from(r.results[0].png, 'base64').subarray(1, 4).toString() === 'PNG', 'a PNG chart')

    r = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')
    assert.match(r.results[0].html, /<table/)
    assert.ok(r.results[0].isMainResult)

    r = await sbx.runCode('import os\nos.environ.get("ONLY_HERE")', { envs: { ONLY_HERE: 'yes' } })
    assert.equal(r.text, 'yes')

    // A run the client gives up on is interrupted: the next one (its own timeout shorter than the sleep) runs.
    await assert.rejects(sbx.runCode('import time\ntime.sleep(600)', { timeoutMs: 2_000 }))
    assert.equal((await sbx.runCode('x', { timeoutMs: 60_000 })).text, '20')

    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(ctx.language, 'python')
    r = await sbx.runCode('import os\nos.getcwd()', { context: ctx })
    assert.equal(r.text, '/tmp')
    r = await sbx.runCode('"x" in globals()', { context: ctx })
    assert.equal(r.text, 'False', 'a new context has its own state')
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await sbx.restartCodeContext(ctx)
    await sbx.removeCodeContext(ctx)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))

    assert.equal(await sbx.pause(), true)
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
    r = await again.runCode('x + 1', { language: 'python' })
    assert.equal(r.text, '21', 'the state came back with the memory')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})
