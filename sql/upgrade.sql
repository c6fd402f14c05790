-- Upgrades a database that holds an older mod_mcp schema to the one this release needs:
--     psql "dbname=mcp" -v ON_ERROR_STOP=1 -f sql/upgrade.sql
-- It reads the version (mcp.schema_version; a database without that table is version 1, the
-- schema as first released), applies each file of migrations/ numbered above it, in order, each
-- in its own transaction, then loads the functions and views again. Running it again does
-- nothing more. Keep the gateways stopped while it runs (see README, "Upgrading").
--
-- Changing the schema: write sql/migrations/NNN-what.sql (tables and data only, in one
-- transaction, ending with its row in mcp.schema_version), add its \if block below, make
-- schema.sql install the same result and record version NNN, and raise MCP_STORE_SCHEMA_VERSION
-- (mod_mcp/mcp_store.h). tests/integration/test_upgrade.py fails while a migrated database and a
-- fresh install differ in structure.

\set ON_ERROR_STOP 1
SELECT to_regclass('mcp.sessions') IS NOT NULL AS mcp_installed, 1 AS mcp_version,
       to_regclass('mcp.schema_version') IS NOT NULL AS mcp_versioned \gset
\if :mcp_versioned
    SELECT max(version) AS mcp_version FROM mcp.schema_version \gset
\endif
\if :mcp_installed
\else
    \echo 'no mod_mcp schema in this database: load sql/schema.sql instead'
    \quit
\endif
\echo 'mod_mcp schema version' :mcp_version

SELECT :mcp_version < 2 AS mcp_need \gset
\if :mcp_need
    \ir migrations/002-exact-texts-and-limits.sql
\endif
SELECT :mcp_version < 3 AS mcp_need \gset
\if :mcp_need
    \ir migrations/003-partitions.sql
\endif
SELECT :mcp_version < 4 AS mcp_need \gset
\if :mcp_need
    \ir migrations/004-session-idle-timeout.sql
\endif
SELECT :mcp_version < 5 AS mcp_need \gset
\if :mcp_need
    \ir migrations/005-notify-followed.sql
\endif
SELECT :mcp_version < 6 AS mcp_need \gset
\if :mcp_need
    \ir migrations/006-stateless-streams.sql
\endif
SELECT :mcp_version < 7 AS mcp_need \gset
\if :mcp_need
    \ir migrations/007-era-bridge.sql
\endif
SELECT :mcp_version < 8 AS mcp_need \gset
\if :mcp_need
    \ir migrations/008-bridge-tool-headers.sql
\endif
SELECT :mcp_version < 9 AS mcp_need \gset
\if :mcp_need
    \ir migrations/009-foreign-key-indexes.sql
\endif
SELECT :mcp_version < 10 AS mcp_need \gset
\if :mcp_need
    \ir migrations/010-console.sql
\endif
SELECT :mcp_version < 11 AS mcp_need \gset
\if :mcp_need
    \ir migrations/011-trace-id.sql
\endif
SELECT :mcp_version < 12 AS mcp_need \gset
\if :mcp_need
    \ir migrations/012-backend-eras.sql
\endif
SELECT :mcp_version < 13 AS mcp_need \gset
\if :mcp_need
    \ir migrations/013-federation.sql
\endif
SELECT :mcp_version < 14 AS mcp_need \gset
\if :mcp_need
    \ir migrations/014-events-session-fk-default-only.sql
\endif
SELECT :mcp_version < 15 AS mcp_need \gset
\if :mcp_need
    \ir migrations/015-stream-slots.sql
\endif
SELECT :mcp_version < 16 AS mcp_need \gset
\if :mcp_need
    \ir migrations/016-lease-in-place.sql
\endif
SELECT :mcp_version < 17 AS mcp_need \gset
\if :mcp_need
    \ir migrations/017-one-index-of-open-streams.sql
\endif

BEGIN;
\ir functions.sql
\ir retention.sql
COMMIT;
\ir audit.sql
SELECT 'mod_mcp schema version ' || max(version) AS upgraded FROM mcp.schema_version;
