#!/bin/sh
# One-shot: create Temporal's two PostgreSQL databases and bring their schemas up to the version
# this admin-tools image ships. Safe to run again: existing databases are kept and only
# migrated forward.
set -eu
sql() { temporal-sql-tool --plugin postgres12 --ep "${POSTGRES_SEEDS}" -p "${DB_PORT}" \
  -u "${POSTGRES_USER}" --pw "${POSTGRES_PWD}" "$@"; }
for db in temporal temporal_visibility; do
  case "$db" in
    temporal) schema=temporal ;;
    *) schema=visibility ;;
  esac
  sql --db "$db" create || echo "database $db exists"
  sql --db "$db" setup-schema -v 0.0 || echo "schema of $db exists"
  sql --db "$db" update-schema -d "/etc/temporal/schema/postgresql/v12/$schema/versioned"
done
echo "Temporal's databases are ready"
