// Serves an express app (or any request listener) on a free loopback port.
import http from 'node:http';
import net from 'node:net';

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

// One request written byte for byte (header values that are not UTF-8); the response's status.
export function rawStatus(port, head) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let got = Buffer.alloc(0);
    socket.on('data', (d) => { got = Buffer.concat([got, d]); });
    socket.on('end', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(got.toString('latin1'))?.[1])));
    socket.on('error', reject);
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), Buffer.from('Content-Length: 0\r\nConnection: close\r\n\r\n')]));
  });
}
