//! Client for the redis-rl module: typed commands, and the gateway of `CLIENTS.md`.
