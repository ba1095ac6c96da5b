//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! `migrations` directory at compile time, and cargo does not watch it otherwise
//! (<https://docs.rs/sqlx/latest/sqlx/macro.migrate.html>).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
