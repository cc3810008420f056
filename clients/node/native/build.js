// Builds the gateway's addon from this repository (`npm install`, `npm run build:native`) with
// napi-rs: native/redis-rl.<platform>.node, and native/index.d.ts from the Rust source. The
// typed clients, RLStore and RateLimiterRL need no addon, so without Rust this says what the
// gateway will need and lets the install go on.
import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
if (spawnSync('cargo', ['--version'], { stdio: 'ignore' }).status !== 0) {
  console.warn('redis-rl: no cargo on the PATH, the gateway addon is not built; the gateway needs Rust '
    + '(https://rustup.rs) and `npm run build:native`, or a prebuilt redis-rl-<platform> package');
  process.exit(0);
}
// CARGO_TARGET_DIR, when set, shares compiled dependencies with other builds.
const targetDir = process.env.CARGO_TARGET_DIR ? ['--target-dir', process.env.CARGO_TARGET_DIR] : [];
execFileSync(join(pkg, 'node_modules', '.bin', 'napi'),
  ['build', '--platform', '--release', '--manifest-path', 'native/Cargo.toml', '--output-dir', 'native', '--no-js', ...targetDir],
  { cwd: pkg, stdio: 'inherit' });
