#!/bin/sh
# shellcheck disable=SC2086  # RL_MODULE_ARGS is split on purpose: each word is a module argument
# Runs like the official images' entrypoint: arguments that start with `-` (or a first argument
# naming a .conf file) are the server's, any other command runs as given. The server is started
# with the module loaded, except in Sentinel mode, which runs no modules.
set -eu

case "${1:--}" in
  -*|*.conf) set -- "$RL_SERVER" "$@" ;;
esac

case "$1" in
  redis-server|valkey-server|"$RL_SERVER") ;;
  *) exec "$@" ;;
esac

server=$1
shift
# These must come first to mean what they mean, and start no server.
case "${1:-}" in
  -v|--version|-h|--help|--test-memory) exec "$server" "$@" ;;
esac
for arg in "$@"; do
  [ "$arg" = --sentinel ] && exec "$server" "$@"
done

# A config file must come first; options given on the command line then override it. Without one,
# protected mode is turned off as the official images do, or nothing outside the container could
# connect without a password; a `--protected-mode yes` given here still wins, coming later.
case "${1:-}" in
  *.conf)
    conf=$1
    shift
    exec "$server" "$conf" --loadmodule "$RL_MODULE" ${RL_MODULE_ARGS:-} "$@"
    ;;
esac
exec "$server" --protected-mode no --loadmodule "$RL_MODULE" ${RL_MODULE_ARGS:-} "$@"
