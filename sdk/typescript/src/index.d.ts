// Types of Airlock's JavaScript SDK. Objects are the API's JSON as it is (snake_case); options are camelCase.

export declare const DEFAULT_URL: string
/** The most readFile holds of a file unless maxBytes says otherwise (256 MiB). */
export declare const DEFAULT_MAX_READ_BYTES: number

export declare class AirlockError extends Error {
  constructor(status: number, code: string, message: string)
  /** The HTTP status (0 for an error inside a stream). */
  status: number
  /** not_found, conflict, invalid_argument, … */
  code: string
  /** The API's message. */
  apiMessage: string
}
export declare class InvalidArgumentError extends AirlockError {}
export declare class AuthenticationError extends AirlockError {}
export declare class PermissionDeniedError extends AirlockError {}
export declare class NotFoundError extends AirlockError {}
export declare class ConflictError extends AirlockError {}
export declare class RateLimitError extends AirlockError {}
/** 413: too large; also thrown by readFile when a file is larger than its bound. */
export declare class TooLargeError extends AirlockError {}

export interface NetworkRule {
  action: 'allow' | 'deny'
  name?: string
  host?: string
  ports?: Array<number | string>
  cidrs?: string[]
  methods?: string[]
  path_prefix?: string
}
export interface NetworkPolicy {
  default?: 'allow' | 'deny'
  rules?: NetworkRule[]
  credentials?: Array<Record<string, unknown>>
  public_ports?: number[]
}

export interface Sandbox {
  id: string
  state: string
  reason?: string
  template: string
  cpu: number
  memory_mb: number
  disk_mb: number
  timeout_seconds: number
  metadata: Record<string, string>
  created_at: string
  started_at?: string
  ends_at?: string
  stopped_at?: string
  network: NetworkPolicy
  runtime: string
  node?: string
}

export interface Session {
  id: string
  state: 'creating' | 'running' | 'pausing' | 'paused' | 'resuming' | 'failed' | 'deleting' | 'deleted'
  reason?: string
  template: string
  cpu: number
  memory_mb: number
  disk_mb: number
  metadata: Record<string, string>
  idle_timeout_seconds: number
  auto_resume: boolean
  rolling_interval_seconds: number
  timeout_seconds: number
  on_timeout: 'delete' | 'pause'
  ends_at?: string
  sandbox_id?: string
  head_snapshot_id?: string
  parent_session_id?: string
  forked_from_snapshot_id?: string
  created_at: string
  updated_at: string
  last_activity_at: string
  paused_at?: string
  runtime: string
  node?: string
}

export interface ExecResult {
  exit_code: number
  signal?: string
  stdout: string
  stderr: string
  stdout_truncated?: boolean
  stderr_truncated?: boolean
  timed_out?: boolean
  duration_ms: number
}

export interface ExitStatus {
  exit_code: number
  signal: string
}

export interface FileInfo {
  name: string
  path: string
  type: 'file' | 'dir' | 'symlink' | 'other'
  size: number
  mode: string
  mod_time: string
  target?: string
}

export interface Snapshot {
  id: string
  session_id: string
  parent_id?: string
  name?: string
  trigger: string
  state: string
  reason?: string
  pinned?: boolean
  logical_bytes: number
  stored_bytes: number
  kind: string
  created_at: string
  completed_at?: string
}

export interface Timeline {
  head_snapshot_id?: string
  snapshots: Snapshot[]
}

export interface SnapshotDiff {
  from: string
  to: string
  changes?: Array<{ path: string; change: string; type?: string; size?: number }>
  truncated?: boolean
  path?: string
  unified?: string
  binary?: boolean
}

export interface Flow {
  decision: 'allow' | 'deny'
  protocol: string
  host?: string
  dst_ip: string
  dst_port: number
  rule?: string
  reason?: string
  sandbox_id: string
  start: string
  end: string
}

export interface AccessToken {
  id: string
  name?: string
  sandbox_id?: string
  session_id?: string
  scopes: string[]
  port?: number
  prefix: string
  created_at: string
  expires_at: string
  revoked_at?: string
  /** The secret: in the answer to its creation only. */
  token?: string
}

export interface ClientOptions {
  /** Default: AIRLOCK_URL, else http://127.0.0.1:7070. */
  url?: string
  /** An API key or an access token. Default: AIRLOCK_API_KEY. */
  apiKey?: string
  /** Per request; default 300 000. */
  timeoutMs?: number
}

export interface Resources {
  template?: string
  cpu?: number
  memoryMB?: number
  diskMB?: number
  env?: Record<string, string>
  metadata?: Record<string, string>
  /** Hosts (or *.domain) it may reach; the rest is denied. */
  allowHosts?: string[]
  /** A whole egress policy (instead of allowHosts). Neither: no network. */
  network?: NetworkPolicy
  runtime?: string
}

export interface ListOptions {
  state?: string
  metadata?: Record<string, string>
  limit?: number
}

export interface ExecOptions {
  env?: Record<string, string>
  cwd?: string
  user?: string
  stdin?: string
  timeoutSeconds?: number
}

export interface StreamOptions {
  env?: Record<string, string>
  cwd?: string
  user?: string
  /** Runs the process on a terminal of this size. */
  pty?: { rows: number; cols: number }
}

export declare class Airlock {
  constructor(opts?: ClientOptions)
  readonly url: string

  createSandbox(o?: Resources & { timeoutSeconds?: number }): Promise<Sandbox>
  getSandbox(id: string): Promise<Sandbox>
  listSandboxes(o?: ListOptions): Promise<Sandbox[]>
  deleteSandbox(id: string): Promise<void>
  /** Makes the sandbox end seconds from now. */
  setTimeout(id: string, seconds: number): Promise<Sandbox>
  /** The sandbox's egress log: each connection and plain-HTTP request, and the gateway's decision. */
  egress(sandboxId: string, o?: { decision?: 'allow' | 'deny'; host?: string; limit?: number }): Promise<Flow[]>

  /** Runs cmd (an argv) to completion; a non-zero exit is exit_code, not an error. id: a sandbox or a session. */
  exec(id: string, cmd: string[], o?: ExecOptions): Promise<ExecResult>
  execStream(id: string, cmd: string[], o?: StreamOptions): Promise<Process>
  /**
   * The file's contents, read as a stream holding at most maxBytes (default DEFAULT_MAX_READ_BYTES): a
   * larger file, or one the sandbox grows while it is read, throws TooLargeError having read no more.
   */
  readFile(id: string, path: string, o?: { maxBytes?: number }): Promise<Uint8Array>
  readText(id: string, path: string, o?: { maxBytes?: number }): Promise<string>
  writeFile(id: string, path: string, data: string | Uint8Array, o?: { mode?: number }): Promise<FileInfo>
  stat(id: string, path: string): Promise<FileInfo>
  listFiles(id: string, path: string): Promise<FileInfo[]>
  mkdir(id: string, path: string): Promise<FileInfo>
  move(id: string, from: string, to: string): Promise<FileInfo>
  remove(id: string, path: string, o?: { recursive?: boolean }): Promise<void>

  createSession(o?: Resources & {
    idleTimeoutSeconds?: number
    autoResume?: boolean
    rollingIntervalSeconds?: number
    /** Bounds each run (none by default); then onTimeout applies. */
    timeoutSeconds?: number
    onTimeout?: 'delete' | 'pause'
  }): Promise<Session>
  getSession(id: string): Promise<Session>
  listSessions(o?: ListOptions): Promise<Session[]>
  deleteSession(id: string): Promise<void>
  pauseSession(id: string): Promise<Session>
  resumeSession(id: string): Promise<Session>
  setSessionTimeout(id: string, seconds: number): Promise<Session>
  forkSession(id: string, count?: number, o?: { snapshotId?: string }): Promise<Session[]>
  snapshotSession(id: string, name?: string): Promise<Snapshot>
  timeline(id: string): Promise<Timeline>
  restoreSession(id: string, o: { snapshotId?: string; at?: string }): Promise<Session>
  diff(id: string, from: string, to: string, path?: string): Promise<SnapshotDiff>

  runCode(id: string, code: string, o?: RunCodeOptions): Promise<Execution>
  createCodeContext(id: string, o?: { language?: string; cwd?: string }): Promise<CodeContext>
  listCodeContexts(id: string): Promise<CodeContext[]>
  restartCodeContext(id: string, contextId: string): Promise<void>
  deleteCodeContext(id: string, contextId: string): Promise<void>
  createToken(o: { sandboxId?: string; sessionId?: string; scopes?: Array<'exec' | 'files' | 'ports'>; ttlSeconds?: number; name?: string; port?: number }): Promise<AccessToken>
  listTokens(o?: { sandboxId?: string; sessionId?: string }): Promise<AccessToken[]>
  revokeToken(id: string): Promise<void>
}

export declare class Process implements AsyncIterable<{ stream: 'stdout' | 'stderr'; data: Uint8Array }> {
  readonly processId: string
  /** Set once the process ended. */
  readonly exit?: ExitStatus
  /** Output bytes lost, by stream, because the process wrote faster than it was read. */
  readonly dropped: Record<string, number>
  [Symbol.asyncIterator](): AsyncIterator<{ stream: 'stdout' | 'stderr'; data: Uint8Array }>
  wait(): Promise<ExitStatus>
  sendStdin(data: string | Uint8Array): Promise<void>
  closeStdin(): Promise<void>
  resize(rows: number, cols: number): Promise<void>
  /** "TERM", "KILL", "INT", … */
  signal(signal: string): Promise<void>
  /** Stops following the process; it keeps running. */
  close(): Promise<void>
}

/** A code context of a sandbox: a kernel of its own, with its state. */
export interface CodeContext {
  id: string
  language: string
  cwd: string
}

export interface RunCodeOptions {
  /** The context to run in; with neither it nor language, the default one. */
  contextId?: string
  language?: string
  /** Environment variables for this run only. */
  env?: Record<string, string>
  /** Interrupts the run past it (default 300, at most 3600). */
  timeoutSeconds?: number
  signal?: AbortSignal
  onStdout?: (text: string) => unknown
  onStderr?: (text: string) => unknown
  onResult?: (result: CodeResult) => unknown
  onError?: (error: CodeError) => unknown
}

/** A value the code produced, in each representation it has (png and jpeg base64). */
export interface CodeResult {
  is_main_result: boolean
  text?: string
  html?: string
  markdown?: string
  svg?: string
  png?: string
  jpeg?: string
  pdf?: string
  latex?: string
  json?: unknown
  javascript?: string
  extra?: Record<string, unknown>
}

/** An exception the code raised (or TimeoutError, InterpreterError). */
export interface CodeError {
  name: string
  value: string
  traceback: string
}

export class Execution {
  results: CodeResult[]
  stdout: string[]
  stderr: string[]
  error?: CodeError
  execution_count: number
  /** The main result's text (the last expression's value). */
  readonly text: string | undefined
}
