export { RL, SCRIPT_PATH, TimeoutError, withDeadline } from './client.js';
export { adapt, classify, fromIoredis, fromIovalkey, fromNodeRedis, fromSendCommand } from './adapters.js';
export * as commands from './commands.js';
export { ALGOS } from './commands.js';
export { RLError } from './errors.js';
export { commonSlot, durationArg, keySlot, parseDuration } from './wire.js';
export { RLStore } from './express-rate-limit.js';
export { RateLimiterRL, RateLimiterRes } from './rate-limiter-flexible.js';
export { expressMiddleware, fastifyPlugin, fetchWithRetry, Gateway, parsePolicy, PolicyError, PolicyStore, retryAfterMs,
  MemoryStore, PublishedPolicy, renderHeaders } from './gateway/index.js';
