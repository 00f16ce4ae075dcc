#!/bin/bash
# The registry's PostgreSQL set-up of the README ("Two hosts, a primary and two synchronous
# standbys"), step by step, for Debian 12's postgresql package (PostgreSQL 15, clusters run by
# pg_ctlcluster). Run as root (or as postgres) on the machine each step names:
#
#   hba SUBNET ADDR...               on p, s1 and s2 (Debian keeps pg_hba.conf outside the data,
#                                     so a copy does not have it, and any of them may be promoted):
#                                     the rootbox hosts' SUBNET may log in, each registry machine's
#                                     ADDR may replicate; added once, then reloaded
#   primary PASSWORD                 on p:  the rootbox role (REPLICATION) and database, listening
#                                     on every address (a restart); no synchronous_standby_names yet
#   standby NAME PRIMARY [PORT]      on s1, s2: this cluster's data replaced by a copy of PRIMARY
#                                     (pg_basebackup -c fast -P), streaming under the name NAME
#                                     (the password is PGPASSWORD's, or ~postgres/.pgpass's)
#   sync SETTING NAME...             on p: once each NAME streams, synchronous_standby_names =
#                                     SETTING (e.g. 'ANY 1 (s1, s2)'); waits until they are sync/quorum
#   promote [SETTING]                on the most advanced standby: promoted, and its
#                                     synchronous_standby_names reset (or SETTING, once the other
#                                     standby follows it and streams)
#   follow PRIMARY [PORT] NAME       on the other standby: stream from the promoted one
#
# Where (environment; Debian's defaults): PGVER=15 CLUSTER=main, DATA (the cluster's data dir,
# /var/lib/postgresql/$PGVER/$CLUSTER), PG_CTL (start/stop/promote of this cluster:
# "pg_ctlcluster $PGVER $CLUSTER"), the local psql by PGHOST/PGPORT/PGUSER (Debian: the postgres
# user over the socket), BASEBACKUP_OPTS (more pg_basebackup flags), WAIT_S (how long a step
# waits for replication, 60). Several clusters on one machine: pg_createcluster 15 s1 --port 5433,
# then CLUSTER=s1 PGPORT=5433 for its steps. The tests (test/helpers/postgres.ts) run these steps
# with their own DATA, PG_CTL and ports.
set -euo pipefail

PGVER=${PGVER:-15}
CLUSTER=${CLUSTER:-main}
DATA=${DATA:-/var/lib/postgresql/$PGVER/$CLUSTER}
PG_CTL=${PG_CTL:-pg_ctlcluster $PGVER $CLUSTER}
BIN=/usr/lib/postgresql/$PGVER/bin
WAIT_S=${WAIT_S:-60}

die() { echo "registry-cluster: $*" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
ctl() { $PG_CTL "$@"; }
q() { as_pg psql -X -qtA -v ON_ERROR_STOP=1 -d "${PGDATABASE:-postgres}" -c "$1"; }
lit() { printf "'%s'" "${1//\'/\'\'}"; } # an SQL string literal
# waits until the query answers t
until_t() {
  local what=$1 sql=$2 end=$((SECONDS + WAIT_S))
  until [ "$(q "$sql" 2>/dev/null || true)" = t ]; do
    [ $SECONDS -lt $end ] || die "gave up after ${WAIT_S}s waiting until $what"
    sleep 0.05
  done
}

step=${1:-}
[ $# -gt 0 ] && shift
case "$step" in
  hba)
    [ $# -ge 1 ] || die "usage: hba SUBNET [REGISTRY_MACHINE_ADDR...]"
    subnet=$1
    shift
    hba=$(as_pg psql -X -qtA -d "${PGDATABASE:-postgres}" -c "SHOW hba_file" 2>/dev/null || echo "/etc/postgresql/$PGVER/$CLUSTER/pg_hba.conf")
    lines=("host rootbox rootbox $subnet scram-sha-256")
    for a in "$@"; do lines+=("host replication rootbox $a/32 scram-sha-256"); done
    for l in "${lines[@]}"; do grep -qxF "$l" "$hba" || echo "$l" | as_pg tee -a "$hba" >/dev/null; done
    ctl reload 2>/dev/null || true # a stopped cluster reads it when it starts
    ;;
  primary)
    [ $# -ge 1 ] || die "usage: primary PASSWORD"
    password=$1
    q "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rootbox') THEN CREATE ROLE rootbox LOGIN; END IF; END\$\$"
    q "ALTER ROLE rootbox REPLICATION PASSWORD $(lit "$password")"
    [ "$(q "SELECT count(*) FROM pg_database WHERE datname = 'rootbox'")" = 1 ] || q "CREATE DATABASE rootbox OWNER rootbox"
    q "ALTER SYSTEM SET listen_addresses = '*'" # wal_level = replica and max_wal_senders = 10 are the defaults
    ctl restart # listen_addresses takes a restart
    ;;
  standby)
    [ $# -ge 2 ] || die "usage: standby NAME PRIMARY [PORT]"
    name=$1 primary=$2 port=${3:-5432}
    ctl stop 2>/dev/null || true
    rm -rf "$DATA"
    # shellcheck disable=SC2086 # BASEBACKUP_OPTS is flags
    as_pg "$BIN/pg_basebackup" -h "$primary" -p "$port" -U rootbox -D "$DATA" -R -X stream -c fast -P ${BASEBACKUP_OPTS:-}
    # -R wrote standby.signal and primary_conninfo; the later line wins: the same, named
    conninfo=$(grep '^primary_conninfo' "$DATA/postgresql.auto.conf" | tail -1 | sed "s/^primary_conninfo = '\(.*\)'$/\1/")
    echo "primary_conninfo = '$conninfo application_name=$name'" | as_pg tee -a "$DATA/postgresql.auto.conf" >/dev/null
    ctl start
    until_t "$name streams from $primary" "SELECT count(*) = 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'"
    ;;
  sync)
    [ $# -ge 2 ] || die "usage: sync SETTING NAME..."
    setting=$1
    shift
    # set before a standby streams, every commit waits for one that is not there: writes hang
    for n in "$@"; do until_t "$n streams" "SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $(lit "$n") AND state = 'streaming'"; done
    q "ALTER SYSTEM SET synchronous_standby_names = $(lit "$setting")"
    q "SELECT pg_reload_conf()" >/dev/null
    for n in "$@"; do until_t "$n is synchronous" "SELECT sync_state IN ('sync', 'quorum') FROM pg_stat_replication WHERE application_name = $(lit "$n")"; done
    q "SELECT application_name || ' ' || sync_state FROM pg_stat_replication ORDER BY 1"
    ;;
  promote)
    ctl promote
    until_t "promoted" "SELECT NOT pg_is_in_recovery()"
    # the copy of the old primary's postgresql.auto.conf names standbys that do not stream from
    # this one: every commit would wait for them (and hang) until this is reset
    if [ $# -ge 1 ] && [ -n "$1" ]; then
      q "ALTER SYSTEM SET synchronous_standby_names = $(lit "$1")"
    else
      q "ALTER SYSTEM RESET synchronous_standby_names"
    fi
    q "SELECT pg_reload_conf()" >/dev/null
    ;;
  follow)
    [ $# -ge 3 ] || die "usage: follow PRIMARY PORT NAME"
    primary=$1 port=$2 name=$3
    q "ALTER SYSTEM SET primary_conninfo = $(lit "host=$primary port=$port user=rootbox${PGPASSWORD:+ password=$PGPASSWORD} application_name=$name")"
    q "SELECT pg_reload_conf()" >/dev/null
    until_t "$name streams from $primary" "SELECT count(*) = 1 FROM pg_stat_wal_receiver WHERE status = 'streaming' AND sender_port = $port"
    ;;
  *) die "usage: registry-cluster.sh hba|primary|standby|sync|promote|follow … (see the header)" ;;
esac
