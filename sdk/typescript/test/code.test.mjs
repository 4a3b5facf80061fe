// The code interpreter through the SDK: run by internal/e2e/code_test.go, which builds the
// code-interpreter template first and names it in AIRLOCK_CODE_TEMPLATE (skipped without it).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Airlock, NotFoundError } from '../src/index.js'

const template = process.env.AIRLOCK_CODE_TEMPLATE
const skip = template ? false : 'needs a code-interpreter template: run by internal/e2e/code_test.go'

test('runCode: state, streamed output, errors, charts, contexts', { skip }, async () => {
  const c = new Airlock()
  const se = await c.createSession({ template })
  try {
    let ex = await c.runCode(se.id, 'y = 6\ny * 7')
    assert.equal(ex.text, '42')
    const out = []
    ex = await c.runCode(se.id, 'print("hi", y)', { onStdout: (t) => out.push(t) })
    assert.deepEqual(out, ['hi 6\n'])
    assert.deepEqual(ex.stdout, ['hi 6\n'])
    ex = await c.runCode(se.id, 'raise ValueError("no")')
    assert.equal(ex.error.name, 'ValueError')
    assert.match(ex.error.traceback, /ValueError: no/)
    ex = await c.runCode(se.id, 'import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()')
    assert.equal(Buffer.from(ex.results[0].png, 'base64').subarray(1, 4).toString(), 'PNG')
    ex = await c.runCode(se.id, 'import time\ntime.sleep(30)', { timeoutSeconds: 1 })
    assert.equal(ex.error.name, 'TimeoutError')
    const ctx = await c.createCodeContext(se.id, { cwd: '/tmp' })
    assert.equal((await c.runCode(se.id, 'import os\nos.getcwd()', { contextId: ctx.id })).text, '/tmp')
    assert.ok((await c.listCodeContexts(se.id)).some((x) => x.id === ctx.id))
    await c.deleteCodeContext(se.id, ctx.id)
    await assert.rejects(c.runCode(se.id, '1', { contextId: ctx.id }), NotFoundError)
  } finally {
    await c.deleteSession(se.id)
  }
})
