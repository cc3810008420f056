// Serves an express app (or any request listener) on a free loopback port.
import http from 'node:http';

export async function listen(handler) {
  const srv = http.createServer(handler);
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    server: srv,
    close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }),
  };
}
