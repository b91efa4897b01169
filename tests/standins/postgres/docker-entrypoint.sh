#!/usr/bin/env bash
# The test image's entrypoint (tests/standins/postgres/Dockerfile): upstream's contract for
# the official image, written for this image. Upstream: docker-library/postgres
# 17/bookworm/docker-entrypoint.sh @2925b19; each function names the one it follows.
#   POSTGRES_PASSWORD  required to initialise (unless POSTGRES_HOST_AUTH_METHOD=trust):
#                      without it the container exits 1 with upstream's error
#   POSTGRES_USER      the superuser initdb makes (default postgres)
#   POSTGRES_DB        a database made after initdb (default: POSTGRES_USER)
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD, <VAR>_FILE (Docker secrets)
#   PGDATA             initdb runs only where it holds no PG_VERSION; then the server
#                      starts (exec: postgres is PID 1 and gets the stop signal)
# Run as root it makes the folders, hands them to postgres and re-runs itself as that
# user (upstream uses gosu; setpriv is util-linux's, already in Debian); run with
# `--user 999` (the kit's compose) it never chowns, so it needs no capability.
set -Eeo pipefail

# upstream file_env: VAR or VAR_FILE (never both), else the default
file_env() {
  local var="$1" file_var="${1}_FILE" value="${2:-}"
  if [ -n "${!var:-}" ] && [ -n "${!file_var:-}" ]; then
    printf >&2 'error: both %s and %s are set (but are exclusive)\n' "$var" "$file_var"
    exit 1
  fi
  if [ -n "${!var:-}" ]; then
    value="${!var}"
  elif [ -n "${!file_var:-}" ]; then
    value="$(<"${!file_var}")"
  fi
  export "$var"="$value"
  unset "$file_var"
}

# upstream docker_setup_env: the defaults, and whether PGDATA holds a cluster already
setup_env() {
  file_env POSTGRES_PASSWORD
  file_env POSTGRES_USER postgres
  file_env POSTGRES_DB "$POSTGRES_USER"
  file_env POSTGRES_INITDB_ARGS
  : "${POSTGRES_HOST_AUTH_METHOD:=}"
  DATABASE_ALREADY_EXISTS=
  if [ -s "$PGDATA/PG_VERSION" ]; then DATABASE_ALREADY_EXISTS=true; fi
}

# upstream docker_create_db_directories: PGDATA 0700 (chmod failures ignored, as upstream:
# PostgreSQL itself refuses a folder it cannot use), the socket folder, chown only as root
create_directories() {
  mkdir -p "$PGDATA"
  chmod 00700 "$PGDATA" || :
  mkdir -p /var/run/postgresql || :
  chmod 03775 /var/run/postgresql || :
  if [ "$(id -u)" = 0 ]; then
    find "$PGDATA" \! -user postgres -exec chown postgres '{}' +
    find /var/run/postgresql \! -user postgres -exec chown postgres '{}' +
  fi
}

# upstream docker_verify_minimum_env: no password and no trust = refuse to initialise,
# in upstream's words (the first line is what users search for)
verify_minimum_env() {
  if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    cat >&2 <<-'EOE'
		Error: Database is uninitialized and superuser password is not specified.
		       You must specify POSTGRES_PASSWORD to a non-empty value for the
		       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".

		       You may also use "POSTGRES_HOST_AUTH_METHOD=trust" to allow all
		       connections without a password. This is *not* recommended.
	EOE
    exit 1
  fi
}

# upstream docker_init_database_dir: initdb with the superuser and its password from a
# pipe (never a file, never argv); POSTGRES_INITDB_ARGS word-split as upstream's eval does
init_database_dir() {
  local args=()
  if [ -n "$POSTGRES_INITDB_ARGS" ]; then
    read -r -a args <<<"$POSTGRES_INITDB_ARGS"
  fi
  # a trailing newline: --pwfile refuses a truly empty file (upstream issue 1025)
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") "${args[@]}"
}

# upstream pg_setup_hba_conf: every host connection by the server's password_encryption
# (scram-sha-256), unless POSTGRES_HOST_AUTH_METHOD says otherwise
setup_hba_conf() {
  [ "${1:-}" != postgres ] || shift
  local auth
  auth="$(postgres -C password_encryption "$@")"
  : "${POSTGRES_HOST_AUTH_METHOD:=$auth}"
  printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
}

# upstream docker_process_sql: psql as the superuser, stopping on the first error
process_sql() {
  local runner=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
  if [ -n "$POSTGRES_DB" ]; then runner+=(--dbname "$POSTGRES_DB"); fi
  PGHOST= PGHOSTADDR= "${runner[@]}" "$@"
}

# upstream docker_temp_server_start / _stop: a server on the unix socket only
# (listen_addresses=''), so nothing outside sees it until initialisation is over: the
# kit's healthcheck asks over TCP and says ready only for the real server
temp_server_start() {
  [ "${1:-}" != postgres ] || shift
  set -- "$@" -c listen_addresses='' -p "${PGPORT:-5432}"
  NOTIFY_SOCKET= PGUSER="${PGUSER:-$POSTGRES_USER}" \
    pg_ctl -D "$PGDATA" -o "$(printf '%q ' "$@")" -w start
}

temp_server_stop() {
  PGUSER="${PGUSER:-postgres}" pg_ctl -D "$PGDATA" -m fast -w stop
}

# upstream docker_setup_db: POSTGRES_DB made unless it exists (the variable is a psql
# literal/identifier, never SQL text)
setup_db() {
  local exists
  exists="$(POSTGRES_DB= process_sql --dbname postgres --set db="$POSTGRES_DB" --tuples-only \
    <<<"SELECT 1 FROM pg_database WHERE datname = :'db' ;")"
  if [ -z "$exists" ]; then
    POSTGRES_DB= process_sql --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db" ;'
  fi
}

# upstream docker_process_init_files: *.sh run (or sourced when not executable), *.sql fed
# to psql; compressed SQL is left out here (the kit ships no init files)
process_init_files() {
  local f
  for f; do
    case "$f" in
      *.sh) if [ -x "$f" ]; then echo "$0: running $f"; "$f"; else echo "$0: sourcing $f"; . "$f"; fi ;;
      *.sql) echo "$0: running $f"; process_sql -f "$f" ;;
      *) echo "$0: ignoring $f" ;;
    esac
  done
}

# upstream _pg_want_help: these flags print and exit, no initialisation
wants_help() {
  local arg
  for arg; do
    case "$arg" in -'?' | --help | --describe-config | -V | --version) return 0 ;; esac
  done
  return 1
}

main() {
  # a first argument that is a flag is the server's (upstream: `set -- postgres "$@"`)
  if [ "${1:0:1}" = - ]; then set -- postgres "$@"; fi
  if [ "$1" = postgres ] && ! wants_help "$@"; then
    setup_env
    create_directories
    if [ "$(id -u)" = 0 ]; then
      exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
    fi
    if [ -z "$DATABASE_ALREADY_EXISTS" ]; then
      verify_minimum_env
      ls /docker-entrypoint-initdb.d/ >/dev/null  # unreadable: stop before a half-made cluster
      init_database_dir
      setup_hba_conf "$@"
      export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
      temp_server_start "$@"
      setup_db
      process_init_files /docker-entrypoint-initdb.d/*
      temp_server_stop
      unset PGPASSWORD
      printf '\nPostgreSQL init process complete; ready for start up.\n\n'
    else
      printf '\nPostgreSQL Database directory appears to contain a database; Skipping initialization\n\n'
    fi
  fi
  exec "$@"
}

main "$@"
