// Types of the redis-rl package (ESM `src/`, CommonJS `dist/index.cjs`).

// Buffers are Uint8Arrays: the declarations need no @types/node.
export type Bytes = string | Uint8Array;
/** Milliseconds, or the module's syntax ("250ms", "10s", "1m"). Finer than 1 ms is refused. */
export type Duration = number | string;
export type Algo = 'gcra' | 'bucket' | 'window' | 'sliding' | 'log';
export const ALGOS: readonly Algo[];

export type ErrorKind = 'unavailable' | 'refused' | 'unexpected_reply' | 'invalid_request';
export class RLError extends Error {
  readonly kind: ErrorKind;
  readonly isUnavailable: boolean;
  /** True when the call missed its deadline. */
  readonly timeout?: boolean;
}
export class TimeoutError extends RLError {}

export interface AdmitRequest {
  key: Bytes; limit: number; period: Duration; burst?: number; cost?: number; algo?: Algo; dryRun?: boolean;
  reserve?: { id: Bytes; keep?: Duration };
}
export interface MultiRule { name: string; key: Bytes; limit: number; period: Duration; burst?: number; cost?: number; algo?: Algo }
export interface MultiRequest { rules: MultiRule[]; dryRun?: boolean }
export interface GrantRequest { key: Bytes; limit: number; period: Duration; burst?: number; algo?: Algo; want: number; ttl?: Duration }
export interface AcquireRequest { key: Bytes; capacity: number; lease: Duration; holder?: Bytes }

export interface Decision { allowed: boolean; remaining: number; retry_after_ms: number; reset_after_ms: number; capacity: number }
export interface MultiDecision {
  allowed: boolean; denied_by: string | null; retry_after_ms: number;
  rules: { name: string; remaining: number; reset_after_ms: number }[];
}
export interface GrantReply { granted: number; remaining: number; valid_ms: number; retry_after_ms: number }
export interface Lease { acquired: boolean; holder: string | null; in_flight: number; retry_after_ms: number }
export interface Settlement { delta: number; remaining: number }
/** RL.ALLOCATE's answer: what the reporter's region may admit until the lease ends. */
export interface Allotment { allocation: number; lease_ms: number; region_demand: number; total_demand: number }
/** RL.ALLOCATE on the home store of a global rule; `lease` in ms or as text ("2s"). */
export interface AllocateRequest {
  key: Bytes; limit: number; region: string; reporter: string; demand: number; held: number;
  reserve: number; regions: number; lease: Duration;
}
export interface Info {
  algo: Algo | 'semaphore'; limit: number; period_ms: number; capacity: number; remaining: number; reset_after_ms: number;
  ttl_ms: number; tat_us?: number; tokens?: number; updated_us?: number; window_start_ms?: number; count?: number;
  previous?: number; current?: number; entries?: number; logged_units?: number; in_flight?: number;
  next_expiry_ms?: number; reservations?: number; debt?: number;
}
export interface Throttle { limited: boolean; limit: number; remaining: number; retry_after: number; reset_after: number }

/** A command: its arguments, the keys it touches and the parser of its reply. */
export interface Command<T> { name: string; args: Bytes[]; keys: Bytes[]; parse(raw: unknown): T }
export namespace commands {
  function admit(req: AdmitRequest): Command<Decision>;
  function multi(req: MultiRequest): Command<MultiDecision>;
  function grant(req: GrantRequest): Command<GrantReply>;
  function acquire(req: AcquireRequest): Command<Lease>;
  function release(key: Bytes, holder: Bytes): Command<boolean>;
  function renew(key: Bytes, holder: Bytes, lease: Duration): Command<boolean>;
  function settle(key: Bytes, id: Bytes, actual: number, options?: { forget?: boolean }): Command<Settlement | null>;
  function info(key: Bytes): Command<Info | null>;
  function allocate(req: AllocateRequest): Command<Allotment>;
  function throttle(key: Bytes, maxBurst: number, count: number, periodSeconds: number, quantity?: number): Command<Throttle>;
}

/** One interface over Redis clients: resolves the raw reply or rejects with an RLError. */
export interface Adapter { send(name: string, args: Bytes[], firstKey?: Bytes): Promise<unknown> }
export type SendCommand = (...args: string[]) => Promise<unknown>;
/** An ioredis/iovalkey client or Cluster, a node-redis client or cluster, an adapter, or a sendCommand function. */
export type Store = Adapter | SendCommand | object;
export function adapt(store: Store): Adapter;
export function fromIoredis(client: object, options?: { Command?: unknown }): Adapter;
export const fromIovalkey: typeof fromIoredis;
export function fromNodeRedis(client: object): Adapter;
export function fromSendCommand(sendCommand: SendCommand): Adapter;
export function classify(err: unknown): RLError;

export type Mode = 'module' | 'script';
export interface Logger { info?(...args: unknown[]): void; warn?(...args: unknown[]): void; error?(...args: unknown[]): void }
export interface RLOptions {
  /** Deadline of each call, in ms. */
  timeout?: number;
  mode?: 'auto' | Mode;
  /** The script's text (default the rl.lua this package ships). */
  script?: string;
  logger?: Logger;
  onMode?(mode: Mode): void;
}
export const SCRIPT_PATH: string;
export class RL {
  constructor(store: Store, options?: RLOptions);
  readonly adapter: Adapter;
  /** The mode in force, null until detected. */
  readonly mode: Mode | null;
  admit(req: AdmitRequest, options?: CallOptions): Promise<Decision>;
  multi(req: MultiRequest, options?: CallOptions): Promise<MultiDecision>;
  grant(req: GrantRequest, options?: CallOptions): Promise<GrantReply>;
  acquire(req: AcquireRequest, options?: CallOptions): Promise<Lease>;
  release(key: Bytes, holder: Bytes): Promise<boolean>;
  renew(key: Bytes, holder: Bytes, lease: Duration): Promise<boolean>;
  /** `forget`: then forget the reservation, so the id reserves (and is charged) anew. */
  settle(key: Bytes, id: Bytes, actual: number, options?: { forget?: boolean }): Promise<Settlement | null>;
  info(key: Bytes): Promise<Info | null>;
  allocate(req: AllocateRequest, options?: CallOptions): Promise<Allotment>;
  throttle(key: Bytes, maxBurst: number, count: number, periodSeconds: number, quantity?: number): Promise<Throttle>;
  execute<T>(cmd: Command<T>, options?: CallOptions): Promise<T>;
}
/** `timeout`: the call's deadline in ms (the client's by default); `cancel`: a token the caller
 * sets (`cancelled = true`) when it gives up, after which the call sends nothing more. */
export interface CallOptions {
  timeout?: number;
  cancel?: { cancelled: boolean };
}
export function withDeadline<T>(promise: Promise<T>, ms?: number, cancel?: { cancelled: boolean }): Promise<T>;

export function durationArg(value: Duration, what: string): string;
export function parseDuration(text: string, what?: string): number;
export function keySlot(key: Bytes): number;
export function commonSlot(keys: Bytes[]): number | null;

// ---- express-rate-limit ----
export interface RLStoreOptions {
  sendCommand?: SendCommand;
  sendCommandCluster?: (command: { key: string; isReadOnly: boolean; command: string[] }) => Promise<unknown>;
  client?: Store | RL;
  prefix?: string;
  algo?: Algo;
  burst?: number;
  timeout?: number;
  logger?: Logger;
}
export class RLStore {
  constructor(options: RLStoreOptions);
  prefix: string;
  localKeys: false;
  init(options: { windowMs: number; limit?: number; max?: number; skipFailedRequests?: boolean; skipSuccessfulRequests?: boolean }): void;
  get(key: string): Promise<{ totalHits: number; resetTime: Date | undefined } | undefined>;
  increment(key: string): Promise<{ totalHits: number; resetTime: Date | undefined }>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
}

// ---- rate-limiter-flexible ----
export class RateLimiterRes {
  constructor(remainingPoints?: number, msBeforeNext?: number, consumedPoints?: number, isFirstInDuration?: boolean);
  remainingPoints: number;
  msBeforeNext: number;
  consumedPoints: number;
  isFirstInDuration: boolean;
  toJSON(): { remainingPoints: number; msBeforeNext: number; consumedPoints: number; isFirstInDuration: boolean };
}
export interface RateLimiterRLOptions {
  storeClient: Store | RL;
  points?: number;
  /** Seconds. */
  duration?: number;
  keyPrefix?: string;
  blockDuration?: number;
  insuranceLimiter?: { consume(...args: unknown[]): Promise<unknown> } & Record<string, unknown>;
  timeout?: number;
  algo?: 'gcra' | 'bucket';
  logger?: Logger;
}
export class RateLimiterRL {
  constructor(options: RateLimiterRLOptions);
  consume(key: string | number, points?: number, options?: object): Promise<RateLimiterRes>;
  penalty(key: string | number, points?: number): Promise<RateLimiterRes>;
  reward(key: string | number, points?: number): Promise<RateLimiterRes>;
  get(key: string | number): Promise<RateLimiterRes | null>;
  block(key: string | number, secDuration: number): Promise<RateLimiterRes>;
  delete(key: string | number): Promise<boolean>;
}

// ---- The gateway ----
// The gateway's engine is the native addon (native/index.d.ts declares it); these load it on
// first use.
export class PolicyError extends Error {}
/** Validates a policy document with the engine: its version, or a PolicyError naming the field. */
export function parsePolicy(text: string | object): { version: number };
export class PolicyStore {
  static fromFile(file: string): PolicyStore;
  constructor(policy: string | object, file?: string | null);
  readonly text: string;
  /** The file's text now (the document given, without a file). */
  read(): string;
}
/** A policy published through Redis (`rl-gateway policy publish`), followed. */
export class PublishedPolicy {
  constructor(redis: unknown, options?: { key?: string; cache?: string | null; pollMs?: number; timeoutMs?: number; logger?: Logger });
  /** The snapshot to start with (the store's when good and not older, else a good cache's, whatever the store holds); rejects with a PolicyError saying why there is none. */
  load(): Promise<string>;
  /** Puts the stored snapshot in force if it changed and is higher: its version, or null; rejects with a PolicyError for an entry no gateway may enforce (logged and counted already). */
  refresh(gateway: Gateway): Promise<number | null>;
  /** Follows the key (notices, and a poll every `pollMs`) until `stop()`. */
  follow(gateway: Gateway): this;
  stop(): Promise<void>;
}
export interface GatewayEvent {
  type: 'decision' | 'store_call' | 'grant_refill' | 'breaker_state' | 'policy_version' | 'route_mode' | 'store_mode'
    | 'unknown_plan' | 'unmatched' | 'decision_records_dropped' | 'policy_rejected' | 'capacity_shed';
  route?: string; rule?: string; outcome?: string; result?: string; seconds?: number; state?: string; version?: number;
  mode?: string; count?: number; capacity?: string; class?: string;
}
export interface GatewayOptions {
  store: Store | RL;
  policy: PolicyStore | string | object;
  durableStore?: Store | RL;
  legacyHeaders?: boolean;
  /** Share of admissions whose decision is recorded, 0 to 1 (default 0.001); every other decision is. */
  logSample?: number;
  /** The most decision records a second (default 100); the rest are counted, not written. */
  logPerSecond?: number;
  logger?: Logger;
  hook?(event: GatewayEvent): void;
  identify?(request: GatewayRequest): Promise<{ user?: string; tenant?: string } | undefined> | { user?: string; tenant?: string } | undefined;
  /** One limit across regions: this gateway's region (one of the policy's `regions`), with
   * `home`, the home store its global rules' allocations are asked of. */
  region?: string;
  home?: Store | RL;
  /** This gateway's name among its region's reporters (default: host name and process id). */
  reporter?: string;
}
/** Header values as node:http gives them: one code unit per byte received. */
export interface GatewayRequest {
  method: string; path: string; headers: Record<string, string | string[] | undefined>;
  /** node:http's `headersDistinct`: read instead of `headers` when given (a repeated header's first value). */
  headersDistinct?: Record<string, string[] | undefined>; peer?: string;
  /** The framework routes paths without case (express by default): the route is matched so too. */
  caseInsensitive?: boolean;
}
export interface GatewayDecision {
  status: number;
  headers: [string, string][];
  /** The problem body (JSON text) of a 429, 503 or 500. */
  body?: string;
  /** Settles with the backend's X-Actual-Cost; after a 2xx `status` the reservations are
   * forgotten, so a reused Idempotency-Key is charged anew (no status: kept). */
  finish?(response: { actualCost?: unknown; status?: number }): Promise<void>;
  /** Releases the slots held; resolves once the releases were sent. */
  done?(): Promise<void>;
}
/** A keyed check: a rule of the policy in force by name, the key it counts on, the units it
 * takes (default 1; 0 only asks whether one unit would pass), and whether no request passes it
 * (`blocked`, a limit of 0: refused without a store call, the other checks then only asked). */
export interface GatewayCheck {
  rule: string;
  key: Bytes;
  cost?: number;
  blocked?: boolean;
}
/** What one keyed check decided (for a shadow rule: what it would have decided). */
export interface GatewayCheckOutcome {
  over: boolean;
  /** Units the key holds after this decision, when the store or a limiter told. */
  remaining?: number;
  resetAfterMs?: number;
  /** When over: when the same request would pass. */
  retryAfterMs?: number;
  source: 'store' | 'chunk' | 'cache' | 'blocked' | 'fallback' | 'open';
}
export interface GatewayCheckDecision extends GatewayDecision {
  /** Each check's outcome, in the order given. */
  checks: GatewayCheckOutcome[];
}
export class Gateway {
  constructor(options: GatewayOptions);
  readonly policy: { version: number };
  readonly metrics: { render(): string; count(route: string, rule: string, outcome: string): number };
  reload(): { version: number };
  /** Stops the reports to the home store (with `region`). */
  close(): void;
  decide(request: GatewayRequest): Promise<GatewayDecision | null>;
  /** Keyed checks under the policy's route named `route`, all admitted or none (a route the
   * policy lacks: 500); a rule the policy lacks rejects, naming it, and nothing is decided. */
  check(route: string, checks: GatewayCheck[]): Promise<GatewayCheckDecision>;
}
/** The engine's in-memory store: the module's arithmetic without a server. Replies in the JSON
 * of clients/vectors/README.md. */
export class MemoryStore {
  constructor();
  call(args: (string | number)[], nowUs: number): unknown;
}
/** A rule of a typed decision, as the headers show it. */
export interface ShownRule {
  name: string;
  /** For a semaphore: its capacity. */
  limit: number;
  /** Unused for a semaphore. */
  periodMs?: number;
  capacity: number;
  semaphore?: boolean;
  remaining: number;
  resetAfterMs: number;
  /** Given when this rule refused. */
  retryAfterMs?: number;
}
/** RateLimit-Policy and RateLimit (X-RateLimit-* with `legacy`) for what the typed client
 * decided, rendered by the gateway's engine (the native addon) as every gateway renders them. */
export function renderHeaders(rules: ShownRule[], legacy?: boolean): [string, string][];
export function expressMiddleware(gateway: Gateway): (req: any, res: any, next: (err?: unknown) => void) => Promise<void>;
export function fastifyPlugin(gateway: Gateway): (fastify: any) => Promise<void>;

export interface RetryOptions {
  maxAttempts?: number; baseMs?: number; capMs?: number; fetch?: typeof fetch; random?(): number; sleep?(ms: number): Promise<void>;
}
export function fetchWithRetry(input: string | URL | Request, init?: RequestInit, options?: RetryOptions): Promise<Response>;
export function retryAfterMs(value: string | null | undefined, now?: number): number | null;
