export { Gateway } from './gateway.js';
export { expressMiddleware } from './express.js';
export { fastifyPlugin } from './fastify.js';
export { parsePolicy, PolicyError, PolicyStore, renderKey } from './policy.js';
export { fetchWithRetry, retryAfterMs } from './retry.js';
export { Metrics } from './metrics.js';
export { gcraDecide } from './fallback.js';
