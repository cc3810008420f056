// The client variants every suite can run on: ioredis and node-redis, over RESP2 and RESP3.
import Redis from 'ioredis';
import Valkey from 'iovalkey';
import { createClient } from 'redis';
import { fromIoredis, fromIovalkey, fromNodeRedis } from '../../src/index.js';

export const VARIANTS = [
  { name: 'ioredis RESP2', resp: 2, async connect(port) {
    const c = new Redis({ port, host: '127.0.0.1', protocol: 2, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    await new Promise((res) => c.once('ready', res));
    return { adapter: fromIoredis(c), close: () => c.disconnect() };
  } },
  { name: 'ioredis RESP3', resp: 3, async connect(port) {
    const c = new Redis({ port, host: '127.0.0.1', protocol: 3, replyMapping: 'resp3', enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    await new Promise((res) => c.once('ready', res));
    return { adapter: fromIoredis(c), close: () => c.disconnect() };
  } },
  { name: 'iovalkey RESP2', resp: 2, async connect(port) {
    const c = new Valkey({ port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    c.on('error', () => {});
    await new Promise((res) => c.once('ready', res));
    return { adapter: fromIovalkey(c), close: () => c.disconnect() };
  } },
  { name: 'node-redis RESP2', resp: 2, async connect(port) {
    const c = createClient({ socket: { port, host: '127.0.0.1' }, RESP: 2, disableOfflineQueue: true });
    c.on('error', () => {});
    await c.connect();
    return { adapter: fromNodeRedis(c), close: () => c.destroy() };
  } },
  { name: 'node-redis RESP3', resp: 3, async connect(port) {
    const c = createClient({ socket: { port, host: '127.0.0.1' }, RESP: 3, disableOfflineQueue: true });
    c.on('error', () => {});
    await c.connect();
    return { adapter: fromNodeRedis(c), close: () => c.destroy() };
  } },
];
