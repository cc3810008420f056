export { Gateway } from './gateway.js';
export { expressMiddleware } from './express.js';
export { fastifyPlugin } from './fastify.js';
export { parsePolicy, PolicyError, PolicyStore } from './policy.js';
export { fetchWithRetry, retryAfterMs } from './retry.js';
export { MemoryStore } from './memory.js';
export { renderHeaders } from './headers.js';
export { PublishedPolicy } from './published.js';
