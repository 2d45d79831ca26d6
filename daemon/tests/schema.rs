//! The SQLite and PostgreSQL migrations (`migrations/sqlite`, `migrations/postgres`) are
//! written by hand, twice: applied to fresh databases they must give the same schema —
//! the same tables, the same columns in the same order with the same (mapped) types and
//! nullability, the same primary keys and unique constraints, and the same indexes on the
//! same columns. Needs MEMWATCH_TEST_POSTGRES_URL (see the README); without it the test
//! prints a notice and checks the SQLite side only.

mod common;

use std::collections::BTreeMap;

use memwatch_daemon::Store;
use sqlx::Row;

/// A schema, backend-neutral.
#[derive(Debug, Default, PartialEq, Eq)]
struct Schema {
    /// table -> columns in order: (name, type class, not null).
    tables: BTreeMap<String, Vec<(String, &'static str, bool)>>,
    /// table -> primary-key columns in order.
    primary_keys: BTreeMap<String, Vec<String>>,
    /// (table, columns) of each unique constraint.
    uniques: Vec<(String, Vec<String>)>,
    /// index name -> (table, columns, unique), for indexes made by CREATE INDEX.
    indexes: BTreeMap<String, (String, Vec<String>, bool)>,
}

/// The type class of a declared type: what the daemon reads the column as.
fn class(declared: &str) -> &'static str {
    match declared.to_ascii_lowercase().as_str() {
        "integer" | "bigint" | "int" | "int8" | "bigserial" => "integer",
        "text" => "text",
        "blob" | "bytea" => "bytes",
        "real" | "double precision" | "float8" => "float",
        other => panic!("a column of type {other:?}: add it to the type classes"),
    }
}

/// Tables of the daemon (not sqlx's migration bookkeeping).
fn ours(table: &str) -> bool {
    table != "_sqlx_migrations"
}

async fn sqlite_schema(store: &Store) -> Schema {
    let pool = &store.pool;
    let mut s = Schema::default();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for t in tables.into_iter().filter(|t| ours(t)) {
        let cols = sqlx::query(
            "SELECT name, type, \"notnull\" AS not_null, pk FROM pragma_table_info($1) ORDER BY cid",
        )
        .bind(&t)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut pk: Vec<(i64, String)> = Vec::new();
        let mut columns = Vec::new();
        for c in &cols {
            let name: String = c.try_get("name").unwrap();
            let ty: String = c.try_get("type").unwrap();
            let pk_pos: i64 = c.try_get("pk").unwrap();
            let not_null: i64 = c.try_get("not_null").unwrap();
            if pk_pos > 0 {
                pk.push((pk_pos, name.clone()));
            }
            // A primary-key column is never NULL (SQLite's rowid alias reports 0).
            columns.push((name, class(&ty), not_null != 0 || pk_pos > 0));
        }
        pk.sort();
        s.primary_keys
            .insert(t.clone(), pk.into_iter().map(|(_, n)| n).collect());
        let indexes = sqlx::query(
            "SELECT name, \"unique\" AS is_unique, origin FROM pragma_index_list($1) ORDER BY name",
        )
        .bind(&t)
        .fetch_all(pool)
        .await
        .unwrap();
        for i in &indexes {
            let name: String = i.try_get("name").unwrap();
            let origin: String = i.try_get("origin").unwrap();
            let unique: i64 = i.try_get("is_unique").unwrap();
            let cols: Vec<String> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                    .bind(&name)
                    .fetch_all(pool)
                    .await
                    .unwrap();
            match origin.as_str() {
                "pk" => {} // the table's primary key, read above
                "u" => s.uniques.push((t.clone(), cols)),
                _ => {
                    s.indexes.insert(name, (t.clone(), cols, unique != 0));
                }
            }
        }
        s.tables.insert(t, columns);
    }
    s.uniques.sort();
    s
}

async fn postgres_schema(store: &Store) -> Schema {
    let pool = &store.pool;
    let mut s = Schema::default();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for t in tables.into_iter().filter(|t| ours(t)) {
        let cols = sqlx::query(
            "SELECT column_name::text AS name, data_type::text AS ty, is_nullable::text AS nullable \
             FROM information_schema.columns WHERE table_schema = current_schema() \
             AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(&t)
        .fetch_all(pool)
        .await
        .unwrap();
        let columns = cols
            .iter()
            .map(|c| {
                let name: String = c.try_get("name").unwrap();
                let ty: String = c.try_get("ty").unwrap();
                let nullable: String = c.try_get("nullable").unwrap();
                (name, class(&ty), nullable == "NO")
            })
            .collect();
        s.tables.insert(t.clone(), columns);
        let constraints = sqlx::query(
            "SELECT tc.constraint_name::text AS name, tc.constraint_type::text AS kind, \
             k.column_name::text AS col FROM information_schema.table_constraints tc \
             JOIN information_schema.key_column_usage k ON k.constraint_name = tc.constraint_name \
             AND k.table_schema = tc.table_schema AND k.table_name = tc.table_name \
             WHERE tc.table_schema = current_schema() AND tc.table_name = $1 \
             AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE') \
             ORDER BY tc.constraint_name, k.ordinal_position",
        )
        .bind(&t)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut by: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for c in &constraints {
            let name: String = c.try_get("name").unwrap();
            let kind: String = c.try_get("kind").unwrap();
            let col: String = c.try_get("col").unwrap();
            by.entry((kind, name)).or_default().push(col);
        }
        s.primary_keys.insert(t.clone(), Vec::new());
        for ((kind, _), cols) in by {
            if kind == "PRIMARY KEY" {
                s.primary_keys.insert(t.clone(), cols);
            } else {
                s.uniques.push((t.clone(), cols));
            }
        }
    }
    // Indexes that back no constraint: those made by CREATE INDEX.
    let indexes = sqlx::query(
        "SELECT i.indexname::text AS name, i.tablename::text AS tbl, i.indexdef AS def \
         FROM pg_indexes i WHERE i.schemaname = current_schema() AND NOT EXISTS \
         (SELECT 1 FROM information_schema.table_constraints tc WHERE \
         tc.table_schema = i.schemaname AND tc.constraint_name = i.indexname) ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for i in &indexes {
        let name: String = i.try_get("name").unwrap();
        let table: String = i.try_get("tbl").unwrap();
        let def: String = i.try_get("def").unwrap();
        if !ours(&table) {
            continue;
        }
        // "CREATE [UNIQUE] INDEX name ON schema.table USING btree (a, b)"
        let cols = def
            .rsplit_once('(')
            .and_then(|(_, c)| c.strip_suffix(')'))
            .unwrap_or_else(|| panic!("index definition {def:?}"))
            .split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect();
        s.indexes
            .insert(name, (table, cols, def.starts_with("CREATE UNIQUE")));
    }
    s.uniques.sort();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_and_postgresql_migrations_make_the_same_schema() {
    let dbs = common::dbs("schema").await;
    let sqlite = Store::open(&dbs.urls[0]).await.unwrap();
    let lite = sqlite_schema(&sqlite).await;
    // The SQLite side alone: the tables the daemon reads, each with columns.
    for t in [
        "runs",
        "event_chunks",
        "rollups",
        "peak_snapshots",
        "peak_allocs",
        "live_checkpoints",
    ] {
        assert!(
            lite.tables.get(t).is_some_and(|c| !c.is_empty()),
            "{t}: {lite:?}"
        );
    }
    sqlite.close().await.unwrap();
    let Some(url) = dbs.urls.get(1) else {
        return;
    };
    let pg = Store::open(url).await.unwrap();
    let post = postgres_schema(&pg).await;
    pg.close().await.unwrap();
    assert_eq!(
        lite.tables.keys().collect::<Vec<_>>(),
        post.tables.keys().collect::<Vec<_>>(),
        "tables"
    );
    for (t, cols) in &lite.tables {
        assert_eq!(
            cols, &post.tables[t],
            "columns of {t} (SQLite left, PostgreSQL right)"
        );
    }
    assert_eq!(lite.primary_keys, post.primary_keys, "primary keys");
    assert_eq!(lite.uniques, post.uniques, "unique constraints");
    assert_eq!(lite.indexes, post.indexes, "indexes");
}
