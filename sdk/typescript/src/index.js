// Airlock's JavaScript SDK (ESM); its types are index.d.ts.

export const DEFAULT_URL = 'http://127.0.0.1:7070'

/**
 * The most readFile holds of a file unless maxBytes says otherwise: what a sandbox wrote can be any size,
 * and grow while it is read, so the bound holds while reading, not from a size announced first.
 */
export const DEFAULT_MAX_READ_BYTES = 256 * 1024 * 1024

/** An error answer of the API: its HTTP status, code (not_found, conflict, …) and message. */
export class AirlockError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`)
    this.name = 'AirlockError'
    this.status = status
    this.code = code
    this.apiMessage = message
  }
}
export class InvalidArgumentError extends AirlockError {}
export class AuthenticationError extends AirlockError {}
export class PermissionDeniedError extends AirlockError {}
export class NotFoundError extends AirlockError {}
export class ConflictError extends AirlockError {}
export class RateLimitError extends AirlockError {}
/** 413: too large; also thrown by readFile when a file is larger than its bound. */
export class TooLargeError extends AirlockError {}

const byStatus = {
  400: InvalidArgumentError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  412: ConflictError,
  413: TooLargeError,
  429: RateLimitError,
}

function errorFrom(status, body) {
  let code = 'error'
  let message = typeof body === 'string' ? body.slice(0, 500) : JSON.stringify(body)
  if (body && typeof body === 'object' && body.error && typeof body.error === 'object') {
    code = String(body.error.code ?? code)
    message = String(body.error.message ?? message)
  }
  const E = byStatus[status] ?? AirlockError
  const e = new E(status, code, message)
  e.name = E.name
  return e
}

const env = (name) => (typeof process !== 'undefined' ? process.env?.[name] : undefined)

function work(id, ...rest) {
  const kind = id.startsWith('se_') ? 'sessions' : 'sandboxes'
  return [`/v1/${kind}`, encodeURIComponent(id), ...rest].join('/')
}

function obj(kind, id, ...rest) {
  return [`/v1/${kind}`, encodeURIComponent(id), ...rest].join('/')
}

function dropUndefined(o) {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null))
}

function network(o) {
  if (o.network) return o.network
  if (o.allowHosts?.length) return { default: 'deny', rules: o.allowHosts.map((host) => ({ action: 'allow', host })) }
  return undefined
}

function listQuery(o = {}) {
  const q = { state: o.state, limit: o.limit }
  for (const [k, v] of Object.entries(o.metadata ?? {})) q[`metadata.${k}`] = v
  return q
}

/** A client of Airlock's API: url and apiKey default to AIRLOCK_URL and AIRLOCK_API_KEY. */
export class Airlock {
  constructor(opts = {}) {
    this.url = (opts.url ?? env('AIRLOCK_URL') ?? DEFAULT_URL).replace(/\/+$/, '')
    this.apiKey = opts.apiKey ?? env('AIRLOCK_API_KEY') ?? ''
    this.timeoutMs = opts.timeoutMs ?? 300_000
  }

  async request(method, path, { query, json, body, raw, stream } = {}) {
    const url = new URL(this.url + path)
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v))
    }
    const headers = {}
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`
    let payload
    if (json !== undefined) {
      headers['Content-Type'] = 'application/json'
      payload = JSON.stringify(json)
    } else if (body !== undefined) {
      headers['Content-Type'] = 'application/octet-stream'
      payload = body
    }
    const res = await fetch(url, { method, headers, body: payload, signal: AbortSignal.timeout(this.timeoutMs) })
    if (res.status >= 400) {
      const text = await res.text()
      let parsed = text
      try {
        parsed = JSON.parse(text)
      } catch {}
      throw errorFrom(res.status, parsed)
    }
    if (stream) return res
    if (raw) return new Uint8Array(await res.arrayBuffer())
    if (res.status === 204) return undefined
    const text = await res.text()
    return text ? JSON.parse(text) : undefined
  }

  // --- sandboxes ---

  createSandbox(o = {}) {
    return this.request('POST', '/v1/sandboxes', {
      json: dropUndefined({ template: o.template, cpu: o.cpu, memory_mb: o.memoryMB, disk_mb: o.diskMB,
        timeout_seconds: o.timeoutSeconds, env: o.env, metadata: o.metadata, network: network(o), runtime: o.runtime }),
    })
  }
  getSandbox(id) { return this.request('GET', obj('sandboxes', id)) }
  async listSandboxes(o) { return (await this.request('GET', '/v1/sandboxes', { query: listQuery(o) })).sandboxes }
  async deleteSandbox(id) { await this.request('DELETE', obj('sandboxes', id)) }
  setTimeout(id, seconds) { return this.request('POST', obj('sandboxes', id, 'timeout'), { json: { timeout_seconds: seconds } }) }
  async egress(sandboxId, o = {}) {
    return (await this.request('GET', obj('sandboxes', sandboxId, 'egress'), { query: { decision: o.decision, host: o.host, limit: o.limit } })).flows
  }

  // --- exec and files (a sandbox's, or a session's current sandbox's) ---

  exec(id, cmd, o = {}) {
    return this.request('POST', work(id, 'exec'), {
      json: dropUndefined({ cmd, env: o.env, cwd: o.cwd, user: o.user, stdin: o.stdin, timeout_seconds: o.timeoutSeconds }),
    })
  }
  async readFile(id, path, o = {}) {
    const max = o.maxBytes ?? DEFAULT_MAX_READ_BYTES
    if (!(max > 0)) throw new RangeError(`maxBytes must be positive, not ${max}`)
    const res = await this.request('GET', work(id, 'files'), { query: { path }, stream: true })
    const chunks = []
    let n = 0
    if (res.body) {
      const reader = res.body.getReader()
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        n += value.byteLength
        if (n > max) {
          await reader.cancel().catch(() => {})
          const e = new TooLargeError(413, 'too_large', `${path} is larger than ${max} bytes (readFile's maxBytes)`)
          e.name = 'TooLargeError'
          throw e
        }
        chunks.push(value)
      }
    }
    const out = new Uint8Array(n)
    let at = 0
    for (const c of chunks) {
      out.set(c, at)
      at += c.byteLength
    }
    return out
  }
  async readText(id, path, o) { return new TextDecoder().decode(await this.readFile(id, path, o)) }
  writeFile(id, path, data, o = {}) {
    const body = typeof data === 'string' ? new TextEncoder().encode(data) : data
    return this.request('PUT', work(id, 'files'), { query: { path, mode: o.mode?.toString(8).padStart(4, '0') }, body })
  }
  stat(id, path) { return this.request('GET', work(id, 'files', 'stat'), { query: { path } }) }
  async listFiles(id, path) { return (await this.request('GET', work(id, 'files', 'list'), { query: { path } })).entries }
  mkdir(id, path) { return this.request('POST', work(id, 'files', 'mkdir'), { json: { path } }) }
  move(id, from, to) { return this.request('POST', work(id, 'files', 'move'), { json: { from, to } }) }
  async remove(id, path, o = {}) {
    await this.request('DELETE', work(id, 'files'), { query: { path, recursive: o.recursive ? 'true' : undefined } })
  }

  /** Starts cmd and streams it: see Process. */
  async execStream(id, cmd, o = {}) {
    const { default: WebSocket } = await import('ws')
    const wsURL = this.url.replace(/^http/, 'ws') + work(id, 'exec', 'stream')
    const headers = this.apiKey ? { Authorization: `Bearer ${this.apiKey}` } : {}
    const ws = new WebSocket(wsURL, { headers, maxPayload: 64 << 20 })
    await new Promise((resolve, reject) => {
      ws.once('open', resolve)
      ws.once('unexpected-response', (_req, res) => {
        let text = ''
        res.on('data', (d) => (text += d))
        res.on('end', () => {
          let parsed = text
          try { parsed = JSON.parse(text) } catch {}
          reject(errorFrom(res.statusCode, parsed))
        })
      })
      ws.once('error', reject)
    })
    const p = new Process(ws)
    ws.send(JSON.stringify(dropUndefined({ cmd, env: o.env, cwd: o.cwd, user: o.user, pty: o.pty })))
    await p.started
    return p
  }

  // --- sessions ---

  createSession(o = {}) {
    return this.request('POST', '/v1/sessions', {
      json: dropUndefined({ template: o.template, cpu: o.cpu, memory_mb: o.memoryMB, disk_mb: o.diskMB, env: o.env,
        metadata: o.metadata, network: network(o), idle_timeout_seconds: o.idleTimeoutSeconds, auto_resume: o.autoResume,
        rolling_interval_seconds: o.rollingIntervalSeconds, timeout_seconds: o.timeoutSeconds, on_timeout: o.onTimeout,
        runtime: o.runtime }),
    })
  }
  getSession(id) { return this.request('GET', obj('sessions', id)) }
  async listSessions(o) { return (await this.request('GET', '/v1/sessions', { query: listQuery(o) })).sessions }
  async deleteSession(id) { await this.request('DELETE', obj('sessions', id)) }
  pauseSession(id) { return this.request('POST', obj('sessions', id, 'pause')) }
  resumeSession(id) { return this.request('POST', obj('sessions', id, 'resume')) }
  setSessionTimeout(id, seconds) { return this.request('POST', obj('sessions', id, 'timeout'), { json: { timeout_seconds: seconds } }) }
  async forkSession(id, count = 1, o = {}) {
    return (await this.request('POST', obj('sessions', id, 'fork'), { json: dropUndefined({ count, snapshot_id: o.snapshotId }) })).sessions
  }
  snapshotSession(id, name) { return this.request('POST', obj('sessions', id, 'snapshots'), { json: dropUndefined({ name }) }) }
  timeline(id) { return this.request('GET', obj('sessions', id, 'timeline')) }
  restoreSession(id, o) {
    return this.request('POST', obj('sessions', id, 'restore'), { json: dropUndefined({ snapshot_id: o.snapshotId, at: o.at }) })
  }
  diff(id, from, to, path) { return this.request('GET', obj('sessions', id, 'diff'), { query: { from, to, path } }) }

  // --- access tokens ---

  createToken(o) {
    return this.request('POST', '/v1/tokens', {
      json: dropUndefined({ sandbox_id: o.sandboxId, session_id: o.sessionId, scopes: o.scopes ?? ['exec', 'files'],
        ttl_seconds: o.ttlSeconds, name: o.name, port: o.port }),
    })
  }
  async listTokens(o = {}) {
    return (await this.request('GET', '/v1/tokens', { query: { sandbox_id: o.sandboxId, session_id: o.sessionId } })).tokens
  }
  async revokeToken(id) { await this.request('DELETE', obj('tokens', id)) }

  // --- the code interpreter (a sandbox or session of a code-interpreter template) ---

  /**
   * Runs code in a code context (the default one unless o.contextId or o.language names another) and
   * returns its Execution; o.onStdout, onStderr, onResult and onError get the output as it comes. An
   * exception in the code is execution.error, not thrown.
   */
  async runCode(id, code, o = {}) {
    const headers = { 'Content-Type': 'application/json' }
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`
    const res = await fetch(this.url + work(id, 'code', 'run'), {
      method: 'POST', headers, signal: o.signal,
      body: JSON.stringify(dropUndefined({ code, context_id: o.contextId, language: o.language, env: o.env,
        timeout_seconds: o.timeoutSeconds })),
    })
    if (res.status >= 400) {
      const text = await res.text()
      let parsed = text
      try { parsed = JSON.parse(text) } catch {}
      throw errorFrom(res.status, parsed)
    }
    const execution = new Execution()
    let ended = false
    let rest = ''
    const decoder = new TextDecoder()
    const handle = async (line) => {
      if (!line.trim()) return
      const ev = JSON.parse(line)
      switch (ev.type) {
        case 'stdout': execution.stdout.push(ev.text ?? ''); await o.onStdout?.(ev.text ?? ''); break
        case 'stderr': execution.stderr.push(ev.text ?? ''); await o.onStderr?.(ev.text ?? ''); break
        case 'result': {
          const { type, ...r } = ev
          r.is_main_result = Boolean(r.is_main_result)
          execution.results.push(r)
          await o.onResult?.(r)
          break
        }
        case 'error':
          execution.error = { name: ev.name ?? '', value: ev.value ?? '', traceback: ev.traceback ?? '' }
          await o.onError?.(execution.error)
          break
        case 'number_of_executions': execution.execution_count = ev.execution_count ?? 0; break
        case 'end_of_execution': ended = true; break
      }
    }
    for await (const chunk of res.body) {
      const text = decoder.decode(chunk, { stream: true })
      let i = text.indexOf('\n')
      if (i < 0) { rest += text; continue } // no line ends here: nothing of rest is searched again
      await handle(rest + text.slice(0, i))
      let j
      while ((j = text.indexOf('\n', i + 1)) >= 0) {
        await handle(text.slice(i + 1, j))
        i = j
      }
      rest = text.slice(i + 1)
    }
    await handle(rest + decoder.decode())
    if (!ended) throw new AirlockError(0, 'unavailable', "the run's output ended before its end")
    return execution
  }
  /** Starts a code context (a kernel of its own). */
  createCodeContext(id, o = {}) {
    return this.request('POST', work(id, 'code', 'contexts'), { json: dropUndefined({ language: o.language, cwd: o.cwd }) })
  }
  async listCodeContexts(id) { return (await this.request('GET', work(id, 'code', 'contexts'))).contexts }
  /** Restarts a context's kernel: its state is lost. */
  async restartCodeContext(id, contextId) {
    await this.request('POST', work(id, 'code', 'contexts', encodeURIComponent(contextId), 'restart'))
  }
  async deleteCodeContext(id, contextId) { await this.request('DELETE', work(id, 'code', 'contexts', encodeURIComponent(contextId))) }
}

/** A run's output: its results, stdout and stderr as they came, its error and execution count. */
export class Execution {
  constructor() {
    this.results = []
    this.stdout = []
    this.stderr = []
    this.error = undefined
    this.execution_count = 0
  }

  /** The main result's text (the last expression's value). */
  get text() { return this.results.find((r) => r.is_main_result)?.text }
}

/**
 * A process started with execStream. Iterate it (for await) for { stream, data } output ("stdout" or
 * "stderr"; a terminal's is all "stdout"); send it input, resize its terminal, signal it, wait for its
 * end. close() stops following it; it keeps running.
 */
export class Process {
  constructor(ws) {
    this.ws = ws
    this.processId = ''
    this.exit = undefined
    this.dropped = {}
    this.queue = []
    this.waiters = []
    this.ended = false
    this.error = undefined
    this.started = new Promise((resolve, reject) => {
      this.onStarted = resolve
      this.onFailed = reject
    })
    this.done = new Promise((resolve) => (this.onDone = resolve))
    ws.on('message', (msg, isBinary) => this.handle(msg, isBinary))
    ws.on('close', () => this.finish())
    ws.on('error', (e) => {
      this.error ??= e
      this.finish()
    })
  }

  handle(msg, isBinary) {
    if (isBinary) {
      const b = new Uint8Array(msg)
      if (b.length) this.push({ stream: b[0] === 2 ? 'stderr' : 'stdout', data: b.subarray(1) })
      return
    }
    const m = JSON.parse(msg.toString())
    switch (m.type) {
      case 'started':
        this.processId = m.process_id
        this.onStarted()
        break
      case 'exit':
        this.exit = { exit_code: m.exit_code ?? -1, signal: m.signal ?? '' }
        break
      case 'dropped':
        this.dropped[m.stream] = (this.dropped[m.stream] ?? 0) + (m.bytes ?? 0)
        break
      case 'error': {
        const code = m.error?.code
        const e = errorFrom(code === 'invalid_argument' ? 400 : code === 'not_found' ? 404 : 500, { error: m.error })
        this.error ??= e
        this.onFailed(e)
        break
      }
    }
  }

  push(item) {
    const w = this.waiters.shift()
    if (w) w({ value: item, done: false })
    else this.queue.push(item)
  }

  finish() {
    if (this.ended) return
    this.ended = true
    this.onFailed(this.error ?? new AirlockError(0, 'unavailable', 'the stream ended before the process started'))
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true })
    this.onDone()
  }

  [Symbol.asyncIterator]() {
    return {
      next: () => {
        if (this.queue.length) return Promise.resolve({ value: this.queue.shift(), done: false })
        if (this.ended) return Promise.resolve({ value: undefined, done: true })
        return new Promise((resolve) => this.waiters.push(resolve))
      },
    }
  }

  /** Waits for the end (output not read is kept for the iterator) and returns the exit status. */
  async wait() {
    await this.done
    if (!this.exit) throw this.error ?? new AirlockError(0, 'unavailable', 'the stream ended before the process did')
    return this.exit
  }

  sendStdin(data) {
    const b = typeof data === 'string' ? new TextEncoder().encode(data) : data
    const frame = new Uint8Array(b.length + 1)
    frame.set(b, 1)
    return this.send(frame)
  }
  closeStdin() { return this.send(JSON.stringify({ type: 'close_stdin' })) }
  resize(rows, cols) { return this.send(JSON.stringify({ type: 'resize', rows, cols })) }
  signal(signal) { return this.send(JSON.stringify({ type: 'signal', signal })) }

  send(m) {
    return new Promise((resolve, reject) => this.ws.send(m, (err) => (err ? reject(err) : resolve())))
  }

  /** Stops following the process; it keeps running. */
  async close() {
    if (!this.ended) {
      this.ws.close(1000)
      await this.done
    }
  }
}
