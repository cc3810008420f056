// The gateway as a fastify plugin: an onRequest hook decides, onSend settles before the
// response is passed on, onResponse (and a dropped connection) releases.
const PROBLEM_TYPE = 'application/problem+json';

const DECISION = Symbol('redis-rl decision');

export function fastifyPlugin(gateway) {
  const plugin = async function redisRl(fastify) {
    fastify.addHook('onRequest', async (request, reply) => {
      const decision = await gateway.decide({ method: request.method, path: request.url.split('?')[0],
        headers: request.headers, headersDistinct: request.raw.headersDistinct, peer: request.socket?.remoteAddress });
      if (!decision) return;
      if (decision.status !== 200) {
        for (const [k, v] of decision.headers) reply.header(k, v);
        reply.code(decision.status).type(PROBLEM_TYPE).send(decision.body);
        return reply;
      }
      for (const [k, v] of decision.headers) reply.header(k, v);
      request[DECISION] = decision;
      if (decision.done) {
        if (request.raw.socket?.destroyed) decision.done();
        else request.raw.once('close', decision.done);
      }
    });
    fastify.addHook('onSend', async (request, reply, payload) => {
      await request[DECISION]?.finish?.({ actualCost: reply.getHeader('x-actual-cost'), status: reply.statusCode });
      return payload;
    });
    fastify.addHook('onResponse', async (request) => {
      request[DECISION]?.done?.();
    });
  };
  // Hooks apply to the whole application, not an encapsulated child context.
  plugin[Symbol.for('skip-override')] = true;
  return plugin;
}
