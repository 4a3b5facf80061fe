// Compiled with tsc --noEmit by internal/e2e/sdk_typescript_test.go: the types describe the SDK as used.
import { Airlock, NotFoundError, TooLargeError, DEFAULT_MAX_READ_BYTES, type CodeContext, type ExecResult, type Execution, type Session } from 'airlock-sdk'

async function main(): Promise<void> {
  const c = new Airlock({ url: 'http://127.0.0.1:7070' })
  const sb = await c.createSandbox({ memoryMB: 1024, allowHosts: ['pypi.org'] })
  const r: ExecResult = await c.exec(sb.id, ['true'], { timeoutSeconds: 5 })
  const n: number = r.exit_code
  const p = await c.execStream(sb.id, ['bash'], { pty: { rows: 24, cols: 80 } })
  for await (const { stream, data } of p) {
    const s: 'stdout' | 'stderr' = stream
    const b: Uint8Array = data
    void s, b
  }
  const se: Session = await c.createSession({ timeoutSeconds: 3600, onTimeout: 'pause' })
  const forks: Session[] = await c.forkSession(se.id, 2)
  const ctx: CodeContext = await c.createCodeContext(se.id, { cwd: '/tmp' })
  const ex: Execution = await c.runCode(se.id, 'x = 1', { contextId: ctx.id, onStdout: (t: string) => void t })
  const png: string | undefined = ex.results[0]?.png
  const text: string | undefined = ex.text
  void png, text, ex.error?.traceback
  try {
    await c.getSandbox('sb_x')
  } catch (e) {
    if (e instanceof NotFoundError) void e.status
  }
  try {
    const data: Uint8Array = await c.readFile(sb.id, '/f', { maxBytes: DEFAULT_MAX_READ_BYTES / 2 })
    const t: string = await c.readText(sb.id, '/f', { maxBytes: 1024 })
    void data, t
  } catch (e) {
    if (e instanceof TooLargeError) void e.code
  }
  void n, forks
}
void main
