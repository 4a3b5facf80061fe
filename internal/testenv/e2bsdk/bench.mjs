// Sandbox.create + commands.run('true') + kill through the unmodified e2b SDK, N times (argv[2]); prints
// each iteration's create-to-run time in milliseconds, one per line (the kill is not timed). Run by
// internal/bench/e2b_bench_test.go.
import { Sandbox } from 'e2b'

const n = Number(process.argv[2] || 10)
// One untimed round first: the template is mounted, the SDK's connections made.
await (await Sandbox.create({ timeoutMs: 120_000 })).kill()
for (let i = 0; i < n; i++) {
  const start = performance.now()
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  const r = await sbx.commands.run('true')
  const ms = performance.now() - start
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  await sbx.kill()
  console.log(ms.toFixed(3))
}
